#!/usr/bin/env bash
# cli_hostile.sh: databases as someone else may hand them over.
#  - hostile text (newlines, a gnuplot "!cmd" line, quotes, <script>, |,
#    commas, control characters and ANSI escapes) in device and variant
#    names, config values, messages and timestamps: report (HTML and
#    Markdown, gnuplot run) runs no command and writes no raw <script>;
#    the CSV export parses with the right width, the JSON ones parse; best,
#    show and the main job's "best recorded" line print no control
#    character but newlines;
#  - trials no tune can produce (dim -1, dtype "bogus", a timing of -1 us,
#    a config outside the space, a variant's name not its config's, a
#    created of '9999', a message of 100 KB, ...): merge refuses and reports
#    them, counted by kind, and best is what it was;
#  - read-only: best, show, export and report leave the file's bytes, mtime
#    and journal mode as they were, so does merge its source; as an
#    unprivileged user, on a 0444 file in a 0555 directory, in WAL or
#    rollback mode, they still read it.
#
# usage: FATUNE=build/fatune bash tests/cli_hostile.sh
set -u
NAME=cli_hostile
TIMEOUT_S=120
. "$(dirname "$0")/cli_lib.sh"
if ! python3 -c 'import sqlite3, csv, json' 2>/dev/null; then
  echo "SKIPPED: python3 with sqlite3 is needed to build the databases"
  exit 77
fi
tool() { python3 "$(dirname "$0")/hostile_db.py" "$@"; }
F() { "${TIMEOUT[@]}" "$FATUNE" "$@" </dev/null; }

# A small real database: fatune explore on the emulator at two lengths (a
# single length draws no line plot, and the titles must reach gnuplot).
clean="$tmp/clean.db"
F explore --dim 16 --sweep seq=16:32 --axis norm --backend emu --db "$clean" >"$tmp/ex.out" 2>&1
check "explore makes a database" $? "$(tail -c 300 "$tmp/ex.out")"

# --- hostile text ---------------------------------------------------------------
db="$tmp/hostile.db"
marker="$tmp/pwned"
cp "$clean" "$db" && tool poison "$db" "$marker"
(cd "$tmp" && F report --db "$db" --out "$tmp/rep" >"$tmp/rep.out" 2>"$tmp/rep.err")
rc=$?
(cd "$tmp" && F report --db "$db" --out "$tmp/rep-md" --format md >/dev/null 2>"$tmp/md.err")
rc_md=$?
[ ! -e "$marker" ]
check "report runs no command from the database" $? "$marker exists; plots.gp: $(grep -n '^!' "$tmp/rep/plots.gp" | head -3)"
[ "$rc" -eq 0 ] && [ "$rc_md" -eq 0 ] && [ -s "$tmp/rep/report.html" ] && [ -s "$tmp/rep-md/report.md" ]
check "report writes its pages (html exit $rc, md exit $rc_md)" $? "$(head -c 300 "$tmp/rep.err" "$tmp/md.err")"
! grep -q '^!' "$tmp/rep/plots.gp" && [ "$(grep -c 'set title' "$tmp/rep/plots.gp")" -eq \
  "$(grep -c '^set output' "$tmp/rep/plots.gp")" ] && grep -q 'set title' "$tmp/rep/plots.gp"
check "the gnuplot script has no shell line and one title per figure" $? "$(grep -n '^!\|^set title' "$tmp/rep/plots.gp" | head -5)"
! grep -qi '<script' "$tmp/rep/report.html" "$tmp/rep-md/report.md"
check "neither page holds a raw <script>" $? "$(grep -il '<script' "$tmp/rep/report.html" "$tmp/rep-md/report.md")"
grep -q 'evil&lt;script&gt;' "$tmp/rep/report.html"
check "the HTML shows the device name, escaped" $? "$(grep -c evil "$tmp/rep/report.html")"
grep -q 'No fatune trial timed on evilb&lt;script&gt;' "$tmp/rep/report.html" &&
  ! grep -q 'evilnl' "$tmp/rep/report.html" "$tmp/rep-md/report.md"
check "a baseline's GPU name shown escaped; one with a line break passed over" $? \
  "$(grep -o '.\{40\}evil[bn].\{40\}' "$tmp/rep/report.html" | head -3)"

F export --format csv --db "$db" >"$tmp/x.csv" 2>"$tmp/x.err" && why=$(tool csv "$tmp/x.csv" 2>&1)
check "export csv parses, every record the header's width" $? "${why:-$(cat "$tmp/x.err")}"
for args in "export --format json" "show --json" "best --dim 16 --seq 32 --json"; do
  # shellcheck disable=SC2086
  F $args --db "$db" >"$tmp/j.json" 2>"$tmp/j.err" && why=$(tool json "$tmp/j.json" 2>&1)
  check "$args parses as JSON" $? "${why:-$(cat "$tmp/j.err")}"
done
for args in "best --dim 16 --seq 32" "show" "show --dim 16"; do
  # shellcheck disable=SC2086
  F $args --db "$db" >"$tmp/t.out" 2>&1 && why=$(tool term "$tmp/t.out" 2>&1)
  check "$args prints no control character" $? "${why:-$(head -c 300 "$tmp/t.out")}"
done

# The main job's last line: every variant already recorded (the first one,
# with a hostile name, the best), so it measures nothing and says which is best.
db="$tmp/main.db"
cp "$clean" "$db"
F list --dim 16 --dtype fp32 >"$tmp/list.txt" && tool fill "$db" "$tmp/list.txt" fp32,16,32,32,1,1,0
F --dtype fp32 --dim 16 --seq 32 --batch 1 --heads 1 --backend emu --db "$db" >"$tmp/main.out" 2>"$tmp/main.err"
rc=$?
line=$(grep '^best recorded' "$tmp/main.out")
[ "$rc" -eq 0 ] && [ -n "$line" ] && [[ "$line" == *"<script>"* ]] && why=$(tool term "$tmp/main.out" 2>&1)
check "the main job's 'best recorded' line has no control character" $? \
  "exit $rc: ${why:-$(tail -c 300 "$tmp/main.err")}"

# --- merge refuses what no tune records -----------------------------------------
bad="$tmp/bad.db" ours="$tmp/ours.db"
cp "$clean" "$bad" && cp "$clean" "$ours"
nbad=$(tool bad-trials "$bad")
F best --dim 16 --seq 32 --db "$ours" >"$tmp/before.txt" 2>&1
F merge "$bad" --db "$ours" >"$tmp/m.out" 2>"$tmp/m.err"
rc=$?
F best --dim 16 --seq 32 --db "$ours" >"$tmp/after.txt" 2>&1
[ "$rc" -eq 0 ] && grep -q "merge: $nbad trials refused" "$tmp/m.err" &&
  grep -q "(first: trial [0-9]*: dim -1)" "$tmp/m.err"
check "merge refuses the $nbad bad trials and says which came first" $? \
  "exit $rc: $(cat "$tmp/m.err" "$tmp/m.out" | head -c 400)"
grep -q "merge: 2 variants refused" "$tmp/m.err" &&
  grep -q "of the rows refused, 1 with a field longer than fatune writes, 1 with a name or hash not their config's, 2 with a created not fatune's timestamp, 0 past" "$tmp/m.err"
check "merge counts the refusals by kind: a long message, a forged name, a created of 9999 and one in 2099" $? \
  "$(head -c 600 "$tmp/m.err")"
count() { python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM trials').fetchone()[0])" "$1"; }
cmp -s "$tmp/before.txt" "$tmp/after.txt" && [ "$(count "$ours")" -eq "$(count "$clean")" ]
check "best is unchanged and no bad trial got in" $? "$(diff "$tmp/before.txt" "$tmp/after.txt" | head -5)"

# --- read-only: nothing written -------------------------------------------------
ro="$tmp/ro.db"
cp "$clean" "$ro" && tool delete-mode "$ro"
before=$(tool state "$ro")
for args in "best --dim 16 --seq 32" "show" "export --format csv" "export --format json" \
            "report --out $tmp/rep-ro"; do
  # shellcheck disable=SC2086
  F $args --db "$ro" >"$tmp/ro.out" 2>"$tmp/ro.err"
  rc=$?
  after=$(tool state "$ro")
  [ "$rc" -eq 0 ] && [ "$after" = "$before" ]
  check "$args leaves the file's bytes, mtime and journal mode as they were" $? \
    "exit $rc: $(head -c 200 "$tmp/ro.err"); $before -> $after"
done
F merge "$ro" --db "$tmp/into.db" >"$tmp/mr.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ "$(tool state "$ro")" = "$before" ]
check "merge leaves its source as it was (rollback journal)" $? "exit $rc: $(head -c 300 "$tmp/mr.out"); $(tool state "$ro")"
wal="$tmp/walsrc.db"
cp "$clean" "$wal"
before=$(tool state "$wal")
F merge "$wal" --db "$tmp/into2.db" >"$tmp/mw.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ "$(tool state "$wal")" = "$before" ]
check "merge leaves its source as it was (WAL)" $? "exit $rc: $(head -c 300 "$tmp/mw.out")"

# As a user for whom permissions hold (root ignores them): a 0444 file in a
# 0555 directory, in either journal mode.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
  chmod 755 "$tmp"
  mkdir -m 755 "$tmp/bin" "$tmp/rodir"
  cp "$FATUNE" "$tmp/bin/fatune"
  cp "$clean" "$tmp/rodir/wal.db"
  cp "$ro" "$tmp/rodir/rollback.db"
  chmod 444 "$tmp/rodir/"*.db
  chmod 555 "$tmp/rodir"
  mkdir -m 777 "$tmp/rw"
  nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$tmp/rw" \
               XDG_CACHE_HOME="$tmp/rw" "${TIMEOUT[@]}" "$tmp/bin/fatune" "$@" </dev/null; }
  for f in wal rollback; do
    before=$(tool state "$tmp/rodir/$f.db")
    for args in "best --dim 16 --seq 32" "show" "export --format json"; do
      # shellcheck disable=SC2086
      nobody $args --db "$tmp/rodir/$f.db" >"$tmp/n.out" 2>&1
      rc=$?
      [ "$rc" -eq 0 ] && [ "$(tool state "$tmp/rodir/$f.db")" = "$before" ]
      check "unprivileged $args on a read-only $f file" $? "exit $rc: $(head -c 300 "$tmp/n.out")"
    done
    nobody merge "$tmp/rodir/$f.db" --db "$tmp/rw/into-$f.db" >"$tmp/n.out" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] && [ "$(tool state "$tmp/rodir/$f.db")" = "$before" ]
    check "unprivileged merge from a read-only $f file" $? "exit $rc: $(head -c 300 "$tmp/n.out")"
  done
  [ -z "$(ls "$tmp/rodir" | grep -v '\.db$')" ]
  check "nothing was made beside the read-only files" $? "$(ls "$tmp/rodir")"
  chmod 755 "$tmp/rodir"
else
  echo "note: not root or no setpriv: the unprivileged read-only checks are left out"
fi

finish
