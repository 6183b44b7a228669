#!/usr/bin/env bash
# cli_completion.sh: the bash completion completes commands, each
# command's own flags (from its help) and the values of the flags that
# take a fixed set; the zsh one at least parses, where zsh is installed.
#
# usage: FATUNE=build/fatune bash tests/cli_completion.sh
set -u

NAME=cli_completion
. "$(dirname "$0")/cli_lib.sh"
src="$(dirname "$0")/../completion"
# shellcheck source=../completion/fatune.bash
. "$src/fatune.bash"

# complete WORDS...: COMPREPLY for the last word, as one sorted line.
complete_line() {
  COMP_WORDS=("$FATUNE" "$@")
  COMP_CWORD=$#
  COMPREPLY=()
  _fatune
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}

expect() {
  local want=$1
  shift
  local got
  got=$(complete_line "$@")
  [ "$got" = "$want" ]
  check "complete 'fatune $*' -> '$want'" $? "got '$got'"
}
expect "list " li
expect "explore export " ex
expect "--dtype " run --dt
expect "--backend " run --ba            # run takes no --batch
expect "--backend --batch " --ba        # the main job takes both
expect "--device " best --dev
expect "bf16 " --dtype b
expect "html md " report --format ""
expect "csv json " export --format ""
expect "sm_90 sm_90a " list --arch sm_9
expect "run " help ru
expect "baseline " bas
expect "skew " run --schedule sk
expect "model " mo
expect "fa2 fa3 " model --launch ""
expect "--cubin " model --cu
if command -v zsh >/dev/null 2>&1; then
  zsh -n "$src/_fatune"
  check "the zsh completion parses" $? "zsh -n failed"
else
  echo "SKIPPED the zsh check: no zsh"
fi
finish
