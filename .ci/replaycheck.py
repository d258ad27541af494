#!/usr/bin/env python3
"""replaycheck.py OUT BINARY: fit a calibration from the segment-A runs in OUT (.ci/replaycheck.sh) and
nothing else, simulate each segment with the shipped calibration and with the fitted one, and print the model
against the medians of the real runs (docs/design/market.md, "Checked in batches, each calibrated on
segment A"). The fit: each stage's host rate is the median over its A runs of 402 updates over the trace
hours of rank 0's median pass (the "pass N/M  Xs" lines); the start, the median over every A run of the wall
time outside that many median passes, so that the slower first passes count once, as start, and not in the
rate of a longer job; every other field is the shipped calibration's."""
import json, re, statistics, subprocess, sys, os, glob
W = os.getcwd()
SHIP = W + '/internal/harness/realreplay/testdata/local-lr-a9a.json'
SH = os.environ.get('TERRACE_SHARED', '../shared')
P = SH + '/data/spot/aws_spot_us-east-1_2015-03_to_2015-08.csv.gz'
S = SH + '/data/spot/skypilot/preemption/1-node/aws-04-22-2023'
PS = ['--market', 'persecond', '--preemptions', ','.join(f'{S}/{z}_v100_1.json' for z in ['us-east-1c', 'us-east-1f', 'us-west-2b'])]
SEG = {'A': ['--from', '2015-04-10', '--market', 'bid2015', '--passes', '40'],
       'B': ['--from', '2015-05-04', '--market', 'bid2015', '--passes', '40'],
       'C': ['--from', '2015-05-04'] + PS + ['--passes', '40'],
       'D': ['--from', '2015-06-05', '--market', 'bid2015', '--passes', '80'],
       'E': ['--from', '2015-06-05'] + PS + ['--passes', '40']}
med = statistics.median

def runs(b, seg, tag):
    out = []
    for f in sorted(glob.glob(f'{b}/{seg}-{tag}-*.json')):
        r = json.load(open(f))
        pol = 'ondemand' if tag.startswith('ondemand') else tag
        p = r['policies'][pol]
        txt = open(f[:-5] + '.out').read()
        passes = [float(x) for x in re.findall(r'^pass +\d+/\d+ +([0-9.]+)s', txt, re.M)]
        out.append(dict(p, pass_med=statistics.median(passes), npass=len(passes), rnd=f.split('-')[-1][:-5]))
    return out

def fit(b):
    cal = json.load(open(SHIP))
    rate = lambda rs: round(med(402 / (r['pass_med'] * 900 / 3600) for r in rs))
    a0, a1, a2 = runs(b, 'A', 'ondemand'), runs(b, 'A', 'ondemand1'), runs(b, 'A', 'tiers')
    cal['host_updates_per_hour_by_stage'] = {'0': rate(a0), '1': rate(a1), '2': rate(a2), '3': rate(a2)}
    cal['start_seconds'] = round(med((r['wall_seconds'] - r['pass_med'] * r['npass']) * 900 for r in a0 + a1 + a2))
    cal['note'] = f'fitted from batch {b} segment A runs ({len(a0)}, {len(a1)}, {len(a2)})'
    path = f'{b}/cal.json'
    json.dump(cal, open(path, 'w'), indent=1)
    return path, cal

simcache = {}
def sim(cal, seg, pol):
    k = (cal, seg, pol)
    if k not in simcache:
        out = f'{OUT}/sim-{len(simcache)}.json'
        subprocess.run([BIN, 'replay', '--prices', P, '--calibration', cal, '--policy', pol, '--for', '48h',
                        '--speedup', '900', '--simulate', '--report', out] + SEG[seg], cwd=W, check=True, capture_output=True)
        simcache[k] = json.load(open(out))['policies'][pol]
    return simcache[k]

def pct(s, r):
    return f'{(s - r) / r * 100:+.0f}%'

OUT, BIN = sys.argv[1], os.path.abspath(sys.argv[2])
for b in [OUT]:
    path, cal = fit(b)
    loads, times = [], []
    if os.path.exists(f'{b}/log'):
        for line in open(f'{b}/log'):
            f = line.split()
            if 'load' in f:
                loads.append(float(f[f.index('load') + 1]))
                times.append(f[0])
    if loads:
        print(f'## batch {b}: {times[0]}-{times[-1]} UTC, load average (1 min) {min(loads):.1f}-{max(loads):.1f} around the runs')
    print(f'## batch {b}: fitted {cal["host_updates_per_hour_by_stage"]} start {cal["start_seconds"]}')
    print('| segment | policy | real $ (median; runs) | real h (median; runs) | shipped cal: sim $, h | vs real | batch cal: sim $, h | vs real | evictions sim / real | switches sim / real |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for seg in 'ABCDE':
        for pol in ['ondemand', 'tiers']:
            rs = runs(b, seg, pol)
            if not rs:
                continue
            rd, rh = med(r['dollars'] for r in rs), med(r['hours'] for r in rs)
            s1, s2 = sim(SHIP, seg, pol), sim(path, seg, pol)
            ev = '–'.join(sorted({str(min(r['evictions'] for r in rs)), str(max(r['evictions'] for r in rs))}, key=int))
            sw = '–'.join(sorted({str(min(r['stage_switches'] for r in rs)), str(max(r['stage_switches'] for r in rs))}, key=int))
            ds = ', '.join('%.2f' % r['dollars'] for r in rs)
            hs = ', '.join('%.1f' % r['hours'] for r in rs)
            print(f"| {seg} | {pol} | {rd:.2f} ({ds}) | {rh:.1f} ({hs}) "
                  f"| {s1['dollars']:.2f}, {s1['hours']:.1f} | {pct(s1['dollars'], rd)}, {pct(s1['hours'], rh)} "
                  f"| {s2['dollars']:.2f}, {s2['hours']:.1f} | {pct(s2['dollars'], rd)}, {pct(s2['hours'], rh)} "
                  f"| {s2['evictions']} / {ev} | {s2['stage_switches']} / {sw} |")
    print()
