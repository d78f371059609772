#!/usr/bin/env bash
# Shared by the launchers (sourced): `show ARGS...` prints the arguments as one shell-quoted
# line, single-quoting only where needed, so printed commands are readable and copy-pastable.
show() {
  local out="" a q="'\\''"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=" $a"; else out+=" '${a//\'/$q}'"; fi
  done
  printf '%s' "${out# }"
}
