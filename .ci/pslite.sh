#!/usr/bin/env bash
# dmlc ps-lite beside Terrace on this machine (issue 17; docs/bench.md,
# "ps-lite on this machine"). Builds ps-lite from SRC and our benchmark
# bench/pslite/wirebench.cc against it, then runs N pairs: ps-lite on one
# server and on two (one worker each), then `terrace bench wire`, with the
# load beside each run; prints the medians and Terrace / ps-lite per figure.
# Not in .ci/run: it needs ps-lite's source, which CI cannot fetch.
#
#   bash .ci/pslite.sh SRC OUT N [TERRACE]
#
# SRC is ps-lite's source tree at commit 15b8adf, e.g.
#   git -C /work/.mirror/dmlc+ps-lite/repo archive 15b8adf | tar -x -C SRC
# (built in place: SRC/build/libps.a). TERRACE is a built `terrace` binary;
# without it the script runs `go build ./cmd/terrace` into OUT. FIRST=terrace
# runs Terrace first in every pair. ROUNDS (5, as `bench wire`) is the
# rounds per ps-lite run.
#
# ps-lite's Makefile downloads zmq and protobuf into SRC/deps; this machine
# reaches Debian's mirrors only, so the script installs Debian's
# libzmq3-dev, libprotobuf-dev and protobuf-compiler and points the Makefile
# at them: DEPS_PATH=/usr makes its targets /usr/include/zmq.h and
# /usr/include/google/protobuf/message.h, which exist, so nothing is
# downloaded, and PROTOC=/usr/bin/protoc generates meta.pb.{h,cc}.
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 SRC OUT N [TERRACE]" >&2
	exit 2
fi
src=$(cd "$1" && pwd) n=$3
mkdir -p "$2"
out=$(cd "$2" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}

pkgs="libzmq3-dev libprotobuf-dev protobuf-compiler g++ make"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
	apt-get install -y $pkgs
fi
if [ ! -f "$src/Makefile" ] || [ ! -f "$src/include/ps/ps.h" ]; then
	echo "$src is not ps-lite's source tree" >&2
	exit 2
fi
make -C "$src" ps DEPS_PATH=/usr PROTOC=/usr/bin/protoc >"$out/build.log" 2>&1 ||
	{ tail -30 "$out/build.log" >&2; exit 1; }
# Our program is compiled for this machine (the sum vectorised as Terrace's
# is); libps.a keeps ps-lite's own flags (-O3 -msse2).
g++ -std=c++11 -O3 -march=native -Wall -I"$src/include" -o "$out/wirebench" \
	"$repo/bench/pslite/wirebench.cc" "$src/build/libps.a" -lprotobuf-lite -lzmq -pthread
terrace=${4:-}
if [ -z "$terrace" ]; then
	terrace=$out/terrace
	(cd "$repo" && go build -o "$terrace" ./cmd/terrace)
fi

# Every process started is in pids until it has exited; the trap stops the
# rest, and each runs under `timeout` so that none outlives a killed script.
pids=() kids=""
stop() {
	if [ ${#pids[@]} -gt 0 ]; then
		# The `timeout`s pass the signal on; their children (kids) are named
		# too, in case a `timeout` itself is gone.
		kill "${pids[@]}" $kids 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	pids=() kids=""
}
trap stop EXIT
trap 'stop; exit 130' INT TERM

# The scheduler's port: below the kernel's ephemeral range (32768 and up
# here), where `terrace bench wire`'s own connections take theirs, and not
# listened on (a scheduler that cannot bind aborts).
port=$((20000 + $$ % 10000))
free_port() {
	port=$((port + 1))
	while [ -n "$(ss -Htln "sport = :$port")" ]; do
		port=$((port + 1))
	done
}
# pslite SERVERS REPORT LOG: ps-lite's local launcher (its tests/local.sh):
# a scheduler, the servers and one worker, separate processes on 127.0.0.1.
pslite() {
	free_port
	export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=$1 DMLC_NUM_WORKER=1 \
		DMLC_NODE_HOST=127.0.0.1 DMLC_INTERFACE=lo
	DMLC_ROLE=scheduler timeout 300 "$out/wirebench" --rounds "$rounds" >>"$3" 2>&1 &
	pids+=($!)
	for _ in $(seq "$1"); do
		DMLC_ROLE=server timeout 300 "$out/wirebench" --rounds "$rounds" >>"$3" 2>&1 &
		pids+=($!)
	done
	# The worker adds the scheduler's and servers' processor time to its
	# own: the children of their `timeout`s.
	local try
	for try in $(seq 50); do
		kids=$(pgrep -P "$(IFS=,; echo "${pids[*]}")" | tr '\n' ' ' || true)
		[ "$(wc -w <<<"$kids")" -eq ${#pids[@]} ] && break
		sleep 0.1
	done
	WIREBENCH_PIDS=$kids DMLC_ROLE=worker timeout 300 "$out/wirebench" --rounds "$rounds" --report "$2" >>"$3" 2>&1 &
	pids+=($!)
	# Any process that fails fails the run (a worker whose server has died
	# would wait for it until its timeout); the rest exit after the
	# worker's Finalize. Polled: `wait -n` does not see a process that
	# exited before it was called.
	local st p left
	while [ ${#pids[@]} -gt 0 ]; do
		left=()
		for p in "${pids[@]}"; do
			if kill -0 "$p" 2>/dev/null; then
				left+=("$p")
				continue
			fi
			st=0
			wait "$p" || st=$?
			if [ "$st" -ne 0 ]; then
				echo "ps-lite with $1 server(s): a process exited with status $st; $3:" >&2
				tail -20 "$3" >&2
				exit 1
			fi
		done
		pids=("${left[@]}")
		if [ ${#pids[@]} -gt 0 ]; then
			sleep 0.1
		fi
	done
	kids=""
}

terrace_run() {
	echo "$(date -u +%T) terrace $i load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
	"$terrace" bench wire --report "$out/w.$i.json" >"$out/w.$i.out" 2>&1
}

pslite_run() {
	echo "$(date -u +%T) ps-lite $i load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
	pslite 1 "$out/p1.$i.json" "$out/p.$i.out"
	pslite 2 "$out/p2.$i.json" "$out/p.$i.out"
}

for i in $(seq "$n"); do
	if [ "${FIRST:-pslite}" = terrace ]; then
		terrace_run
		pslite_run
	else
		pslite_run
		terrace_run
	fi
done
echo "$(date -u +%T) end load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"

/usr/bin/python3 - "$out" "$n" <<'PY'
import json, statistics as st, sys
out, n = sys.argv[1], int(sys.argv[2])
ps, te = [], []
for i in range(1, n + 1):
    r = json.load(open(f"{out}/p1.{i}.json"))
    r.update(json.load(open(f"{out}/p2.{i}.json")))
    r["ratio_2s_to_1s"] = r["push_pull_2s_mb_s"] / r["push_pull_mb_s"]
    r["cpu_processes"] = [json.load(open(f"{out}/p{s}.{i}.json"))["cpu_processes"] for s in (1, 2)]
    if r["cpu_processes"] != [3, 4]:
        print(f"pair {i}: ps-lite's processor time counts {r['cpu_processes']} processes, not [3, 4]", file=sys.stderr)
    json.dump(r, open(f"{out}/p.{i}.json", "w"), indent=2)
    ps.append(r)
    te.append(json.load(open(f"{out}/w.{i}.json")))
rows = [("push+pull 1s1w, MB/s", "push_pull_mb_s"), ("push 1s1w, MB/s", "push_mb_s"),
        ("pull 1s1w, MB/s", "pull_mb_s"), ("push+pull 2s1w, MB/s", "push_pull_2s_mb_s"),
        ("ratio_2s_to_1s", "ratio_2s_to_1s"), ("cpu ms, push+pull 1s1w", "push_pull_cpu_ms"),
        ("cpu ms, push 1s1w", "push_cpu_ms"), ("cpu ms, pull 1s1w", "pull_cpu_ms"),
        ("cpu ms, push+pull 2s1w", "push_pull_2s_cpu_ms")]
fmt = lambda v: f"{v:.3f}" if v < 10 else f"{v:.0f}"
print(f"medians of {n} runs each (range), Terrace / ps-lite as the ratio of the medians "
      f"and the median of the pairs' ratios")
print(f"| figure | ps-lite | Terrace | Terrace / ps-lite | per pair |")
print(f"| --- | --- | --- | --- | --- |")
for name, k in rows:
    p, t = [r[k] for r in ps], [r[k] for r in te]
    pairs = st.median(b / a for a, b in zip(p, t))
    print(f"| {name} | {fmt(st.median(p))} ({fmt(min(p))}-{fmt(max(p))}) | {fmt(st.median(t))} "
          f"({fmt(min(t))}-{fmt(max(t))}) | {st.median(t) / st.median(p):.2f} | {pairs:.2f} |")
for label, rs, k in [("ps-lite runs with 2s >= 1s", ps, "ratio_2s_to_1s"),
                     ("Terrace runs with 2s >= 1s", te, "ratio_2s_to_1s")]:
    print(f"{label}: {sum(r[k] >= 1 for r in rs)} of {n}")
m = lambda rs, k: st.median(r[k] for r in rs)
print(f"ps-lite push, pull in flight together (push_then_pull_mb_s): {m(ps, 'push_then_pull_mb_s'):.0f} MB/s; "
      f"2 servers {m(ps, 'push_then_pull_2s_mb_s'):.0f}; push 2s {m(ps, 'push_2s_mb_s'):.0f}, pull 2s {m(ps, 'pull_2s_mb_s'):.0f}")
print(f"Terrace's ceilings in its runs: stream_tcp_mb_s {m(te, 'stream_tcp_mb_s'):.0f}, "
      f"duplex_tcp_mb_s {m(te, 'duplex_tcp_mb_s'):.0f}, duplex_tcp_2c_mb_s {m(te, 'duplex_tcp_2c_mb_s'):.0f}")
PY
