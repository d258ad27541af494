#!/usr/bin/env bash
# Issue 12: the model checked against real replays (docs/design/market.md,
# "Checked in batches, each calibrated on segment A"). ROUNDS rounds of real
# replays at 900x: each round segment A (ondemand, ondemand on one machine,
# tiers: the calibration's runs) then B, C, D and E (ondemand, tiers), with
# the load average before and after each run in OUT/log; then
# .ci/replaycheck.py fits a calibration from this batch's A runs only and
# prints the model against the medians of B-E, with the shipped
# calibration and with the batch's. About 4-5 minutes a round on this
# host; not in .ci/run. Run from the repository root:
#   bash .ci/replaycheck.sh OUT [ROUNDS]
set -euo pipefail
out=$1 rounds=${2:-3}
mkdir -p "$out"
bin=$out/terrace
go build -o "$bin" ./cmd/terrace
P=${TERRACE_SHARED:-../shared}/data/spot/aws_spot_us-east-1_2015-03_to_2015-08.csv.gz
S=${TERRACE_SHARED:-../shared}/data/spot/skypilot/preemption/1-node/aws-04-22-2023
C=internal/harness/realreplay/testdata/local-lr-a9a.json
/usr/bin/python3 -c "import json,sys; c=json.load(open('$C')); c['machines']=1; json.dump(c, open('$out/cal-m1.json','w'), indent=1)"
PS="--market persecond --preemptions $S/us-east-1c_v100_1.json,$S/us-east-1f_v100_1.json,$S/us-west-2b_v100_1.json"
seg() {
	case $1 in
	A) echo "--from 2015-04-10 --market bid2015 --passes 40" ;;
	B) echo "--from 2015-05-04 --market bid2015 --passes 40" ;;
	C) echo "--from 2015-05-04 $PS --passes 40" ;;
	D) echo "--from 2015-06-05 --market bid2015 --passes 80" ;;
	E) echo "--from 2015-06-05 $PS --passes 40" ;;
	esac
}
one() { # round segment policy tag calibration
	local id=$2-$4-$1 rc=0
	echo "$(date +%T) start $id load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
	# shellcheck disable=SC2046
	"$bin" replay --prices "$P" --calibration "$5" --policy "$3" --for 48h $(seg "$2") --speedup 900 \
		--run-dir "$out/run-$id" --report "$out/$id.json" >"$out/$id.out" 2>&1 || rc=$?
	echo "$(date +%T) end   $id rc $rc load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/log"
	rm -rf "$out/run-$id"
}
for r in $(seq "$rounds"); do
	one "$r" A ondemand ondemand "$C"
	one "$r" A ondemand ondemand1 "$out/cal-m1.json"
	one "$r" A tiers tiers "$C"
	for s in B C D E; do
		one "$r" "$s" ondemand ondemand "$C"
		one "$r" "$s" tiers tiers "$C"
	done
done
/usr/bin/python3 .ci/replaycheck.py "$out" "$bin"
