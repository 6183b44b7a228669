#!/usr/bin/env bash
# slurm.sh: a sweep on a real Slurm. The test makes a one-node cluster on
# localhost (munged, slurmctld and slurmd from Debian's packages, in the
# foreground, as processes it owns, with a generated slurm.conf that gives
# the node this machine's cores and listens on free ports), then runs
# scripts/slurm-tune.sh: a job array of shards on the emulator backend and
# the merge job behind it, in a folder whose name holds a %. One task is
# cancelled (scancel) midway, so the merge job never starts; --resubmit
# reruns the task, resuming, and submits the merge again. The
# merged database must hold every key of the sweep exactly once, pass
# PRAGMA integrity_check, and the trials recorded before the cancel must be
# the very rows afterwards (nothing measured twice). SKIPPED, saying why,
# when Slurm is not installed or will not start.
#
# usage: FATUNE=build/fatune bash tests/slurm.sh
set -u

NAME=slurm
. "$(dirname "$0")/cli_lib.sh"
script=$(realpath "$(dirname "$0")/../scripts/slurm-tune.sh")
FATUNE=$(realpath "$FATUNE")

skip() { echo "SKIPPED: $*"; exit 77; }
for c in munged slurmctld slurmd sbatch sinfo squeue scancel scontrol sqlite3 python3; do
  command -v "$c" >/dev/null 2>&1 ||
    skip "no $c (Debian: munge slurmctld slurmd slurm-client sqlite3; scripts/install-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs; run as root (CI does)"

# The daemons are ours: stopped at exit, whatever happens, then $tmp goes.
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap stop EXIT

# Three free TCP ports on localhost.
read -r ctld_port d_port _ < <(python3 - <<'PY'
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
)
host=$(hostname -s)
cores=$(nproc)
c="$tmp/slurm"
mkdir -p "$c/state" "$c/spool"
chmod 700 "$tmp"
head -c 1024 /dev/urandom >"$c/munge.key"
chmod 400 "$c/munge.key"
cat >"$c/slurm.conf" <<EOF
ClusterName=fatunetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$c/munge.sock
StateSaveLocation=$c/state
SlurmdSpoolDir=$c/spool
SlurmctldPidFile=$c/slurmctld.pid
SlurmdPidFile=$c/slurmd.pid
SlurmctldLogFile=$c/slurmctld.log
SlurmdLogFile=$c/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cores State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$c/slurm.conf"

munged --foreground --force --socket="$c/munge.sock" --key-file="$c/munge.key" \
  --pid-file="$c/munged.pid" --log-file="$c/munged.log" --seed-file="$c/munged.seed" \
  >"$c/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$c/munge.sock" ] && break; sleep 0.1; done
[ -S "$c/munge.sock" ] || skip "munged did not start: $(tail -c 300 "$c/munged.out" "$c/munged.log" 2>/dev/null)"
slurmctld -D -i -f "$c/slurm.conf" >"$c/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$c/slurm.conf" -N "$host" >"$c/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %t 2>/dev/null)
  case $state in idle*) up=1; break ;; esac
  sleep 0.2
done
[ "$up" -eq 1 ] || skip "Slurm did not start (node state '${state:-none}'): $(tail -n 3 "$c/slurmctld.log" "$c/slurmd.log" 2>/dev/null | tr '\n' ' ' | tail -c 600)"
echo "slurm: one node '$host' with $cores CPUs, slurmctld on port $ctld_port, slurmd on $d_port"

# The sweep: 3 dims x 4 lengths, one variant per key, at the emulator's
# smallest size, in 3 shards of 4 keys.
sweep=(--dim 32,64,128 --seq 128:1024:x2 --dtype fp16 --backend emu --arch sm_80 --emu-seq 32
       --config block_m=64 --jobs 1 --seed 7)
keys=12
# A % in the folder, which sbatch's --output would take for a pattern
# (%j the job, %a the task) unless escaped.
dir="$tmp/sweep-%j-%a"
"$script" --shards 3 --dir "$dir" --db "$tmp/team.db" --fatune "$FATUNE" --gres none \
  --cpus-per-task 1 --time 10 -- "${sweep[@]}" >"$tmp/submit.out" 2>&1
check "slurm-tune.sh submits the array and the merge job" $? "$(cat "$tmp/submit.out")"
cat "$tmp/submit.out"
array=$(head -n 1 "$dir/array.jobs")

count() {   # DB: its trials, 0 when it is not there yet
  [ -e "$1" ] || { echo 0; return; }
  sqlite3 -readonly "$1" 'SELECT count(*) FROM trials' 2>/dev/null || echo 0
}
# Cancel task 1 once it has recorded a key but not its last.
victim=1 cancelled=""
for _ in $(seq 1800); do
  n=$(count "$dir/shard-$victim.db")
  if [ "$n" -ge 1 ] && [ "$n" -lt 4 ]; then
    scancel "${array}_$victim" && cancelled=$n
    break
  fi
  [ "$n" -ge 4 ] && break
  sleep 0.1
done
[ -n "$cancelled" ]
check "task $victim cancelled midway, after $cancelled of its 4 keys" $? \
  "it recorded ${n:-0} ($(tail -c 300 "$dir/shard-$victim.out" 2>/dev/null))"

# Everything ends but the merge job, which waits on the failed array for ever.
wait_jobs() {
  for _ in $(seq 900); do
    [ -z "$(squeue -h -o %i 2>/dev/null | grep -vx "$(cat "$dir/merge.job")")" ] && return 0
    sleep 0.2
  done
  return 1
}
wait_jobs
check "the array's tasks end" $? "$(squeue 2>&1 | head -n 5)"
for i in 0 1 2; do
  echo "task $i: $(count "$dir/shard-$i.db") trials, $([ -e "$dir/shard-$i.done" ] && echo 'done' || echo 'not done')"
done
before=$(sqlite3 -readonly "$dir/shard-$victim.db" 'SELECT id, created FROM trials ORDER BY id')
scontrol show job "$(cat "$dir/merge.job")" 2>/dev/null | grep -o 'Reason=[^ ]*' | head -n 1 |
  sed 's/^/merge job (first): /'
[ ! -e "$tmp/team.db" ]
check "no merge while task $victim has not finished" $? "$(cat "$dir/merge.out" 2>/dev/null)"

"$script" --resubmit "$dir" "$victim" >"$tmp/resubmit.out" 2>&1
check "slurm-tune.sh --resubmit reruns task $victim and the merge" $? "$(cat "$tmp/resubmit.out")"
cat "$tmp/resubmit.out"
for _ in $(seq 900); do
  [ -n "$(squeue -h -o %i 2>/dev/null)" ] || break
  sleep 0.2
done
for i in 0 1 2; do
  echo "--- task $i (its last run)"
  grep -E '^fatune: (sweep|key)|variants:' "$dir/shard-$i.out" | cut -c 1-150
done
echo "--- merge job output"
cat "$dir/merge.out"
echo "---"
[ -s "$dir/shard-0.out" ] && [ -s "$dir/shard-1.out" ] && [ -s "$dir/shard-2.out" ] &&
  [ -s "$dir/merge.out" ]
check "the logs are in --dir, whose name has a %" $? "$(ls "$tmp")"

n=$(count "$tmp/team.db")
distinct=$(sqlite3 -readonly "$tmp/team.db" \
  'SELECT count(*) FROM (SELECT DISTINCT dtype, dim, req_seq_q, req_seq_k, causal FROM trials)')
want=$(for d in 32 64 128; do for s in 128 256 512 1024; do echo "fp16 $d $s"; done; done)
got=$(sqlite3 -readonly -separator ' ' "$tmp/team.db" \
  'SELECT dtype, dim, req_seq_q FROM trials WHERE req_seq_k = req_seq_q ORDER BY dim, req_seq_q')
[ "$n" -eq "$keys" ] && [ "$distinct" -eq "$keys" ] && [ "$got" = "$want" ]
check "the merged database holds the $keys keys of the sweep, each once" $? \
  "$n trials, $distinct keys: $got"
ok=$(sqlite3 -readonly "$tmp/team.db" 'SELECT count(*) FROM trials WHERE status = '"'ok'")
[ "$ok" -eq "$keys" ]
check "every trial ok" $? "$ok ok"
integrity=$(sqlite3 -readonly "$tmp/team.db" 'PRAGMA integrity_check')
[ "$integrity" = ok ]
check "PRAGMA integrity_check: $integrity" $? "$integrity"
after=$(sqlite3 -readonly "$dir/shard-$victim.db" 'SELECT id, created FROM trials ORDER BY id')
kept=$(printf '%s\n' "$before" | grep -c .)
[ "$kept" -ge 1 ] && [ "$(printf '%s\n' "$after" | head -n "$kept")" = "$before" ] &&
  [ "$(count "$dir/shard-$victim.db")" -eq 4 ]
check "task $victim resumed: the $kept trials it recorded before the cancel untouched, 4 in all" $? \
  "before: $before / after: $after"
[ "$(grep -c ' 1 recorded before' "$dir/shard-$victim.out")" -eq "$kept" ] &&
  [ "$(grep -c ' 0 recorded before' "$dir/shard-$victim.out")" -eq $((4 - kept)) ]
check "the rerun measured only the $((4 - kept)) keys the cancel left" $? \
  "$(grep 'recorded before' "$dir/shard-$victim.out")"
grep -q "^all 3: $keys trials added, 0 replaced" "$dir/merge.out"
check "fatune merge of the 3 shards: $keys added, none replaced" $? "$(tail -n 3 "$dir/merge.out")"
echo "final: $n trials, $distinct distinct keys, integrity $integrity"
finish
