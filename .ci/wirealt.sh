#!/usr/bin/env bash
# Issue 17's figures by alternating builds (docs/bench.md): N rounds of
# `terrace bench wire`, each build in turn, the load beside each run, then
# the medians per build. The host is shared and noisy: compare builds only
# within one such run. Not in .ci/run.
#   bash .ci/wirealt.sh OUT N BIN...    e.g. .ci/wirealt.sh /tmp/w 8 /tmp/terrace.base /tmp/terrace.new
set -euo pipefail
out=$1 n=$2
shift 2
mkdir -p "$out"
for i in $(seq "$n"); do
	for bin in "$@"; do
		b=$(basename "$bin")
		echo "$(date -u +%T) $b $i load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
		"$bin" bench wire --report "$out/w.$b.$i.json" >"$out/w.$b.$i.out" 2>&1
	done
done
/usr/bin/python3 - "$out" "$@" <<'PY'
import glob, json, os, statistics as st, sys
out = sys.argv[1]
for bin in sys.argv[2:]:
    b = os.path.basename(bin)
    rs = [json.load(open(f)) for f in glob.glob(f"{out}/w.{b}.*.json")]
    m = lambda k: st.median(r[k] for r in rs)
    cpu = st.median(r["push_pull_2s_cpu_ms"] / r["push_pull_cpu_ms"] for r in rs)
    print(f"{b} ({len(rs)} runs): push+pull {m('push_pull_mb_s'):.0f} push {m('push_mb_s'):.0f} pull {m('pull_mb_s'):.0f} "
          f"MB/s, duplex {m('duplex_tcp_mb_s'):.0f}, stream {m('stream_tcp_mb_s'):.0f}, ratio_duplex {m('ratio_duplex'):.2f}, "
          f"ratio_2s_to_1s {m('ratio_2s_to_1s'):.3f} ({sum(r['ratio_2s_to_1s'] >= 1 for r in rs)} >= 1.0), "
          f"2s/1s processor time {cpu:.3f}, sparse fresh {m('sparse_push_keys_s')/1e6:.1f} M, cached {m('sparse_cached_push_keys_s')/1e6:.1f} M keys/s")
PY
