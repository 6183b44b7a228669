# bash completion for fatune. The flags come from the command's own help
# (fatune help CMD), so they follow fatune's tables.

_fatune() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local cmds="run list gen compile sass best show export merge baseline model explore report help version"
  local cmd="" w i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    case " $cmds " in *" $w "*) cmd=$w; break ;; esac
  done
  case $prev in
    --dtype) mapfile -t COMPREPLY < <(compgen -W "fp32 fp64 fp16 bf16" -- "$cur"); return ;;
    --op) mapfile -t COMPREPLY < <(compgen -W "fwd bwd decode" -- "$cur"); return ;;
    --backend) mapfile -t COMPREPLY < <(compgen -W "auto emu cuda" -- "$cur"); return ;;
    --space) mapfile -t COMPREPLY < <(compgen -W "default full" -- "$cur"); return ;;
    --schedule) mapfile -t COMPREPLY < <(compgen -W "forward reverse random skew" -- "$cur"); return ;;
    --axis)
      mapfile -t COMPREPLY < <(compgen -W "norm parallel warp_split layout tiles pingpong overlap consumers stages all" -- "$cur")
      return ;;
    --format)
      local f="csv json"
      [ "$cmd" = report ] && f="html md"
      mapfile -t COMPREPLY < <(compgen -W "$f" -- "$cur"); return ;;
    --arch)
      mapfile -t COMPREPLY < <(compgen -W "sm_80 sm_86 sm_89 sm_90 sm_90a sm_100 sm_120" -- "$cur")
      return ;;
    --launch) mapfile -t COMPREPLY < <(compgen -W "fa2 fa3" -- "$cur"); return ;;
    --gpu) mapfile -t COMPREPLY < <(compgen -W "a100 h100 h200 a10 rtx3090 l40s l4 rtx4090 rtx5090 t4" -- "$cur"); return ;;
    --db|--q|--k|--v|--out|--lse|--do|--o|--dq|--dk|--dv|--cubin|--plot) mapfile -t COMPREPLY < <(compgen -f -- "$cur"); return ;;
  esac
  if [[ $cur == -* ]]; then
    local flags
    flags=$("${COMP_WORDS[0]}" help $cmd 2>/dev/null | grep -o -- '--[a-z][a-z-]*' | sort -u)
    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
  elif [ -z "$cmd" ] || [ "$cmd" = help ]; then
    mapfile -t COMPREPLY < <(compgen -W "$cmds" -- "$cur")
  elif [ "$cmd" = merge ] || [ "$cmd" = baseline ] || [ "$cmd" = sass ]; then
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
  fi
}
complete -F _fatune fatune
