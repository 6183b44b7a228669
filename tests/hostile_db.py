#!/usr/bin/env python3
"""hostile_db.py: fatune databases as someone else may hand them over, and
checks of what the commands print from them. Standard library only.

  hostile_db.py poison DB MARKER      hostile text in device and variant names,
                                      config values, messages, timestamps
  hostile_db.py fill DB LIST KEY      a trial for every variant `fatune list`
                                      printed to LIST (KEY: dtype,dim,seq_q,seq_k,
                                      batch,heads,causal), the first one hostile
  hostile_db.py bad-trials DB         rows merge must refuse, one per check (a
                                      forged variant name, a created of '9999' and
                                      one in 2099, a timing of 0, a negative error
                                      and a message of 100 KB among them)
  hostile_db.py long-best DB N        the best trial's variant name N bytes long
  hostile_db.py delete-mode DB        the file in rollback-journal mode
  hostile_db.py state DB              sha256, mtime and journal mode of the file,
                                      read without SQLite (which may write)
  hostile_db.py csv FILE              exit 1 unless every record has the header's width
  hostile_db.py json FILE             exit 1 unless FILE is JSON
  hostile_db.py term FILE             exit 1 if FILE holds a control character
                                      other than a newline
"""
import csv
import hashlib
import json
import os
import sqlite3
import sys

HOSTILE = "<script>alert(1)</script>|,\"'\x07\x1b[31mred\x1b[0m\r\x7f\xc2\x9b2J"


def hostile(marker):
    # A newline then a line that gnuplot would run in a shell; then a line
    # that keeps a script going (gnuplot accepts the unterminated string).
    return "evil%s\n!touch %s\nset title 'x" % (HOSTILE, marker)


def poison(path, marker):
    h = hostile(marker)
    c = sqlite3.connect(path)
    c.execute("UPDATE devices SET name = ?", (h,))
    c.execute("UPDATE variants SET name = ? || id, config = json_set(config, '$.norm', ?)",
              ("v\n!touch pwned\n" + HOSTILE, h))
    c.execute("UPDATE trials SET message = ?", (h,))
    c.execute("UPDATE trials SET created = created || ? WHERE id = (SELECT min(id) FROM trials)",
              ("\x1b[2J\x07",))
    # Baselines: one whose GPU name is printable but hostile (shown,
    # escaped), one with a line break in it (no measurement gives: passed over).
    for gpu in ("evilb<script>alert(1)</script>'\"|x", "evilnl\n!touch %s" % marker):
        c.execute("INSERT INTO baselines (gpu, backend, dtype, dim, seq_q, seq_k, batch, heads, "
                  "causal, median_us, tflops, torch_version, created) VALUES (?, 'sdpa-flash', "
                  "'bf16', 64, 4096, 4096, 4, 16, 0, 1000, 274.9, '2.5', 'x')", (gpu,))
    c.commit()
    c.close()


def fill(path, listing, key):
    dtype, dim, sq, sk, batch, heads, causal = key.split(",")
    c = sqlite3.connect(path)
    tv, = c.execute("SELECT template_version FROM variants LIMIT 1").fetchone()
    dev, = c.execute("SELECT id FROM devices WHERE uuid = 'emu'").fetchone()
    first = True
    for line in open(listing):
        parts = line.split()
        name, hsh = parts[0], parts[-1].split("=", 1)[1]
        cfg = {}
        for kv in parts[1:-1]:
            k, v = kv.split("=", 1)
            cfg[k] = int(v) if v.lstrip("-").isdigit() else v
        c.execute("INSERT OR IGNORE INTO variants (family, template_version, name, hash, config, "
                  "source_hash) VALUES (?, ?, ?, ?, ?, 'x')",
                  (cfg["family"], tv, name, hsh, json.dumps(cfg)))
        vid, = c.execute("SELECT id FROM variants WHERE template_version = ? AND hash = ?",
                         (tv, hsh)).fetchone()
        if first:
            c.execute("UPDATE variants SET name = ? WHERE id = ?", ("v" + HOSTILE, vid))
        ctr = json.dumps({"global_bytes_read": 1 if first else 10 ** 6, "global_bytes_written": 1})
        # The key of the main job on the emulator, which targets sm_90.
        c.execute("INSERT OR REPLACE INTO trials (variant_id, device_id, arch, dtype, dim, "
                  "req_seq_q, req_seq_k, seq_q, seq_k, batch, heads, causal, status, counters, "
                  "fatune_version, created) VALUES (?, ?, 'sm_90', ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                  "'ok', ?, '0', '2024-01-01T00:00:00.000Z')",
                  (vid, dev, dtype, dim, sq, sk, sq, sk, batch, heads, causal, ctr))
        first = False
    c.commit()
    c.close()


def bad_trials(path):
    """Copies of the first ok trial, each wrong in one way and each timed
    at -1 us or 1e-9 us, so that any that got in would rank first."""
    c = sqlite3.connect(path)
    c.execute("PRAGMA ignore_check_constraints = ON")
    t = c.execute("SELECT variant_id, device_id, dtype, dim, seq_q, seq_k, batch, heads, causal, "
                  "arch, req_seq_q, req_seq_k "
                  "FROM trials WHERE status = 'ok' ORDER BY id LIMIT 1").fetchone()
    bogus = c.execute("INSERT INTO variants (family, template_version, name, hash, config, "
                      "source_hash) SELECT family, template_version, 'bogus-config', "
                      "'0123456789ab', json_set(config, '$.norm', 'bogus'), source_hash "
                      "FROM variants WHERE id = ?", (t[0],)).lastrowid
    # A point of the space under another name (and template version, for a
    # hash of its own): a tune of the name would be recorded on its row.
    renamed = c.execute("INSERT INTO variants (family, template_version, name, hash, config, "
                        "source_hash) SELECT family, template_version || '-x', 'fastest', hash, "
                        "config, source_hash FROM variants WHERE id = ?", (t[0],)).lastrowid
    cols = ["variant_id", "device_id", "dtype", "dim", "seq_q", "seq_k", "batch", "heads",
            "causal", "arch", "req_seq_q", "req_seq_k", "status", "median_us", "counters",
            "message", "created", "rel_err"]
    now = c.execute("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')").fetchone()[0]
    base = dict(zip(cols, list(t) + ["ok", 1e-9, None, None, now, None]))
    rows = [dict(base, dim=-1, median_us=-1.0), dict(base, dtype="bogus"),
            dict(base, seq_q=0), dict(base, seq_k=-5), dict(base, batch=0),
            dict(base, heads=-2), dict(base, causal=2, batch=9), dict(base, status="great", batch=8),
            dict(base, batch=3, median_us=-1.0), dict(base, batch=4, median_us=float("inf")),
            dict(base, batch=5, median_us=None,
                 counters='{"global_bytes_read": -100000, "global_bytes_written": 0}'),
            dict(base, batch=6, variant_id=bogus), dict(base, dim=2 ** 32 + t[3]),
            dict(base, batch=10, arch="sm_90; rm"), dict(base, batch=11, req_seq_q=t[4] - 1),
            dict(base, batch=12, created="9999"),
            dict(base, batch=13, status="crashed", message="x" * 100000),
            dict(base, batch=14, variant_id=renamed),
            dict(base, batch=15, median_us=0.0), dict(base, batch=16, rel_err=-1e-3),
            dict(base, batch=17, created="2099-01-01T00:00:00.000Z")]
    for r in rows:
        c.execute("INSERT INTO trials (%s, fatune_version) VALUES (%s, '0')"
                  % (", ".join(cols), ", ".join("?" * len(cols))),
                  [r[k] for k in cols])
    c.commit()
    c.close()
    print(len(rows))


def long_best(path, n):
    c = sqlite3.connect(path)
    c.execute("UPDATE variants SET name = ? WHERE id = (SELECT variant_id FROM best LIMIT 1)",
              ("x" * n,))
    c.commit()
    c.close()


def delete_mode(path):
    c = sqlite3.connect(path)
    c.execute("PRAGMA journal_mode = DELETE").fetchone()
    c.close()


def state(path):
    data = open(path, "rb").read()
    st = os.stat(path)
    mode = "wal" if data[18] == 2 else "rollback"
    print("%s %d %s" % (hashlib.sha256(data).hexdigest(), st.st_mtime_ns, mode))


def check_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    width = len(rows[0])
    bad = [i for i, r in enumerate(rows) if len(r) != width]
    if bad or len(rows) < 2:
        sys.exit("%d records; of the wrong width: %s" % (len(rows), bad[:5]))


def check_json(path):
    with open(path, encoding="utf-8") as f:
        json.load(f)


def check_term(path):
    text = open(path, "rb").read().decode("utf-8")
    bad = sorted({hex(ord(ch)) for ch in text
                  if ch != "\n" and (ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f)})
    if bad:
        sys.exit("control characters: %s" % " ".join(bad))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"poison": lambda: poison(*args), "fill": lambda: fill(*args),
     "bad-trials": lambda: bad_trials(*args), "long-best": lambda: long_best(args[0], int(args[1])),
     "delete-mode": lambda: delete_mode(*args), "state": lambda: state(*args),
     "csv": lambda: check_csv(*args), "json": lambda: check_json(*args),
     "term": lambda: check_term(*args)}[cmd]()


if __name__ == "__main__":
    main()
