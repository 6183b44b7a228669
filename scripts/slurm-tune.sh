#!/usr/bin/env bash
# slurm-tune.sh: a fatune sweep on a Slurm cluster. Submits a job array of
# N tasks, task i running `fatune FATUNE_ARGS --shard i+1/N` into its own
# database DIR/shard-i.db (one GPU each, --gres gpu:1), then a job that
# waits for them (--dependency) and merges every shard's database into one
# (fatune merge), then prints what it holds (fatune show).
#
# usage: scripts/slurm-tune.sh [options] -- FATUNE_ARGS...
#        scripts/slurm-tune.sh --resubmit DIR TASKS
#
#   --shards N        tasks in the array (default 4)
#   --dir DIR         the shards' databases, logs and batch scripts (default
#                     fatune-sweep); every node must see it (a shared
#                     filesystem)
#   --db PATH         the merged database (default DIR/fatune.db)
#   --fatune PATH     the fatune to run (default: the one on PATH)
#   --partition P, --account A, --time T, --constraint C, --cpus-per-task N
#                     passed to sbatch for every job
#   --gres G          the array's generic resources (default gpu:1; none: none)
#   --sbatch ARG      any other sbatch option, for every job (repeatable)
#
# A task that fails (or is cancelled) keeps what it recorded; the merge job
# then refuses to merge and names it. `--resubmit DIR 2` (or 2,5 or 1-3)
# runs those tasks again, resuming where they stopped, and submits the merge
# job again behind them. The job ids are in DIR/array.jobs and DIR/merge.job.
set -euo pipefail

die() { echo "slurm-tune: $*" >&2; exit 2; }

# The comment at the top of this file, without its first line.
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in -h|--help) usage; exit 0 ;; esac

# DIR/merge.sh: merges once every task left its .done mark, and says which
# did not, with the command that reruns them.
write_merge() {
  local dir=$1 shards=$2 fatune=$3 db=$4 self=$5
  cat >"$dir/merge.sh" <<EOF
#!/usr/bin/env bash
set -uo pipefail
dir=$(printf %q "$dir") fatune=$(printf %q "$fatune") db=$(printf %q "$db")
missing=() dbs=()
for ((i = 0; i < $shards; i++)); do
  if [ ! -e "\$dir/shard-\$i.done" ]; then missing+=("\$i"); continue; fi
  [ -e "\$dir/shard-\$i.db" ] && dbs+=("\$dir/shard-\$i.db")   # none: a shard without keys
done
if [ \${#missing[@]} -gt 0 ]; then
  list=\$(IFS=,; echo "\${missing[*]}")
  echo "slurm-tune: task(s) \$list did not finish (see \$dir/shard-N.out); rerun them with:" >&2
  echo "  $(printf %q "$self") --resubmit \$dir \$list" >&2
  exit 1
fi
if [ \${#dbs[@]} -gt 0 ]; then "\$fatune" merge "\${dbs[@]}" --db "\$db" || exit 1; fi
echo "slurm-tune: \${#dbs[@]} shard database(s) merged into \$db"
"\$fatune" show --db "\$db"
EOF
}

# DIR/task.sh: one task of the array, its shard's keys into its database.
write_task() {
  local dir=$1 shards=$2 fatune=$3
  shift 3
  cat >"$dir/task.sh" <<EOF
#!/usr/bin/env bash
set -uo pipefail
dir=$(printf %q "$dir")
i=\${SLURM_ARRAY_TASK_ID:?not a task of a job array}
rm -f "\$dir/shard-\$i.done"
$(printf %q "$fatune") $(printf '%q ' "$@")--shard \$((i + 1))/$shards --db "\$dir/shard-\$i.db"
rc=\$?
[ \$rc -eq 0 ] && touch "\$dir/shard-\$i.done"
exit \$rc
EOF
}

submit_merge() {   # DEPENDENCY
  local dir=$1 dep=$2 id
  mapfile -t opts <"$dir/sbatch.opts"
  # --output is a pattern (%j the job, %a the task): a % of the folder's is %%.
  id=$(sbatch --parsable "${opts[@]}" --job-name fatune-merge \
         --output "${dir//%/%%}/merge.out" --dependency "$dep" "$dir/merge.sh") ||
    die "sbatch of the merge job failed"
  echo "${id%%;*}" >"$dir/merge.job"
  echo "slurm-tune: merge job ${id%%;*} (after $dep), its output in $dir/merge.out"
}

submit_array() {   # DIR TASKS
  local dir=$1 tasks=$2 id
  mapfile -t opts <"$dir/sbatch.opts"
  mapfile -t gres <"$dir/gres.opts"
  id=$(sbatch --parsable "${opts[@]}" "${gres[@]}" --job-name fatune-sweep --array "$tasks" \
         --output "${dir//%/%%}/shard-%a.out" "$dir/task.sh") || die "sbatch of the array failed"
  id=${id%%;*}
  echo "$id" >>"$dir/array.jobs"
  echo "slurm-tune: job array $id, tasks $tasks, each writing $dir/shard-<task>.db" >&2
  echo "$id"
}

if [ "${1:-}" = "--resubmit" ]; then
  [ $# -eq 3 ] || die "usage: slurm-tune.sh --resubmit DIR TASKS (e.g. 2 or 1,3 or 0-2)"
  dir=$2 tasks=$3
  [ -f "$dir/task.sh" ] && [ -f "$dir/merge.job" ] || die "$dir holds no sweep this script submitted"
  [[ $tasks =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] || die "tasks must be like 2, 1,3 or 0-2"
  # The merge job waiting on the failed array would wait for ever.
  scancel "$(cat "$dir/merge.job")" 2>/dev/null || true
  deps=$(paste -sd: "$dir/array.jobs")
  id=$(submit_array "$dir" "$tasks")
  submit_merge "$dir" "afterany:$deps:$id"
  exit 0
fi

shards=4 dir=fatune-sweep db="" fatune="" gres=(--gres gpu:1) opts=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; break ;;
    --shards) shards=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --db) db=${2:?}; shift 2 ;;
    --fatune) fatune=${2:?}; shift 2 ;;
    --gres) if [ "${2:?}" = none ]; then gres=(); else gres=(--gres "$2"); fi; shift 2 ;;
    --partition|--account|--time|--constraint|--cpus-per-task) opts+=("$1" "${2:?}"); shift 2 ;;
    --sbatch) opts+=("${2:?}"); shift 2 ;;
    *) die "unknown option '$1' (see --help); fatune's own options go after --" ;;
  esac
done
[[ $shards =~ ^[1-9][0-9]*$ ]] && [ "$shards" -le 4096 ] || die "--shards takes 1 to 4096"
[ $# -gt 0 ] || die "no fatune options after --: what to sweep (e.g. --dim 64,128 --seq 1024:16384:x2)"
fatune=$(command -v "${fatune:-fatune}") || die "no fatune on PATH (give --fatune PATH)"
fatune=$(realpath "$fatune")
command -v sbatch >/dev/null || die "no sbatch on PATH: not a Slurm cluster"
mkdir -p "$dir"
dir=$(realpath "$dir")
db=$(realpath -m "${db:-$dir/fatune.db}")
# Ask fatune first: bad options are an error here, not in N tasks.
"$fatune" "$@" --shard 1/"$shards" --help >/dev/null || die "fatune refuses these options"

printf '%s\n' "${opts[@]}" >"$dir/sbatch.opts"
printf '%s\n' "${gres[@]}" >"$dir/gres.opts"
[ ${#opts[@]} -gt 0 ] || : >"$dir/sbatch.opts"
[ ${#gres[@]} -gt 0 ] || : >"$dir/gres.opts"
: >"$dir/array.jobs"
write_task "$dir" "$shards" "$fatune" "$@"
write_merge "$dir" "$shards" "$fatune" "$db" "$(realpath "$0")"
chmod +x "$dir/task.sh" "$dir/merge.sh"
id=$(submit_array "$dir" "0-$((shards - 1))")
submit_merge "$dir" "afterok:$id"
