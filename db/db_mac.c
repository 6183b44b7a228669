/*
** db_mac.c
** What makes a stored binary trusted: a keyed BLAKE2b MAC (libsodium's
** crypto_generichash) under a secret key of this user's. A binary is
** loaded only when its MAC verifies, so one this installation did not
** store (written into the file by hand, brought in from another file, or
** stored under another user's key) is compiled again, never run. A
** checksum would not do: anyone can recompute one for a forged blob.
**
** The key is 32 random bytes in $FATUNE_KEY, else
** $XDG_CONFIG_HOME/fatune/key, else ~/.config/fatune/key, created on first
** use (mode 0600, missing directories 0700). $FATUNE_KEY is the file's
** absolute path, never the key. A key file that is a symbolic link, not a
** regular file, not the user's own, open to the group or others, or of
** another size is refused, as is one in a folder that is not the user's
** (or root's) or that the group or others may write: the compile cache is
** then not used, and every kernel is compiled.
*/
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db_int.h"

_Static_assert(DBI_KEY_BYTES == crypto_generichash_KEYBYTES, "a BLAKE2b key");
_Static_assert(DBI_MAC_BYTES == crypto_generichash_BYTES, "a BLAKE2b-256 MAC");

/* Names what the MAC is of, so the key could serve another purpose
** without one MAC passing for the other. */
static const char domain[] = "fatune compile cache binary, version 1";

/* ---- The key file ---- */

/* $FATUNE_KEY must be absolute: a relative one would depend on the working
** directory, and key bytes put there by mistake would name a new file. */
static int key_path(char *buf, size_t n, char *err, size_t errlen) {
  if (dbi_user_path(buf, n, "FATUNE_KEY", "XDG_CONFIG_HOME", ".config", "key",
                    "; binaries are not cached", err, errlen) != 0)
    return -1;
  if (buf[0] != '/')
    return dbi_fail(err, errlen, "$FATUNE_KEY is '%s', not an absolute path: it names the "
                    "key's file (not the key itself); binaries are not cached", buf);
  return 0;
}

/* Whoever can write the key's folder can delete or replace the key, which
** defeats the cache (it cannot forge an entry without the old key): the
** folder must be the user's or root's and closed to the group and others.
** A missing folder is made 0700 with the key. */
static int check_folder(const char *path, char *err, size_t errlen) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';   /* a key at the root: the folder is "/" */
  else *slash = '\0';
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    if (errno == ENOENT) return 0;
    return dbi_fail(err, errlen, "key's folder %s: %s; binaries are not cached", dir,
                    strerror(errno));
  }
  if (!S_ISDIR(sb.st_mode))
    return dbi_fail(err, errlen, "key's folder %s is not a folder; binaries are not cached", dir);
  if (sb.st_uid != geteuid() && sb.st_uid != 0)
    return dbi_fail(err, errlen, "key's folder %s belongs to uid %u, who may replace the key "
                    "%s; binaries are not cached", dir, (unsigned)sb.st_uid, path);
  if (sb.st_mode & 022)
    return dbi_fail(err, errlen, "key's folder %s has mode %04o: others may delete or replace "
                    "the key %s (make the folder 0700); binaries are not cached", dir,
                    (unsigned)(sb.st_mode & 07777), path);
  return 0;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

/* Writes a new key to a file of its own, created O_EXCL and O_NOFOLLOW,
** then links it in under path: a process starting at the same moment
** never reads half a key, and a key already there is never replaced. */
static int create_key(const char *path, char *err, size_t errlen) {
  char tmp[4200];
  unsigned char key[DBI_KEY_BYTES];
  if (dbi_make_parents(path, err, errlen) != 0) return -1;
  snprintf(tmp, sizeof tmp, "%s.%08x.new", path, (unsigned)randombytes_random());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return dbi_fail(err, errlen, "cannot create the key %s: %s", tmp, strerror(errno));
  randombytes_buf(key, sizeof key);
  int ok = write_all(fd, key, sizeof key) == 0 && fsync(fd) == 0;
  sodium_memzero(key, sizeof key);
  if (close(fd) != 0) ok = 0;
  int linked = ok && link(tmp, path) == 0, why = errno;
  if (unlink(tmp) != 0 && ok) return dbi_fail(err, errlen, "cannot remove %s: %s", tmp,
                                              strerror(errno));
  if (!ok) return dbi_fail(err, errlen, "cannot write the key %s", tmp);
  if (!linked && why != EEXIST)   /* EEXIST: another process made it first */
    return dbi_fail(err, errlen, "cannot create the key %s: %s", path, strerror(why));
  return 0;
}

/* Reads the key from fd after checking that the file is fit to hold one. */
static int read_key(int fd, const char *path, unsigned char *key, char *err, size_t errlen) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return dbi_fail(err, errlen, "key %s: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return dbi_fail(err, errlen, "key %s is not a regular file; binaries are not cached", path);
  if (sb.st_uid != geteuid())
    return dbi_fail(err, errlen, "key %s belongs to uid %u, not to you; binaries are not "
                    "cached", path, (unsigned)sb.st_uid);
  if (sb.st_mode & 077)
    return dbi_fail(err, errlen, "key %s has mode %04o: others may read or change it (make it "
                    "0600); binaries are not cached", path, (unsigned)(sb.st_mode & 07777));
  if (sb.st_size != DBI_KEY_BYTES)
    return dbi_fail(err, errlen, "key %s is %lld bytes, not %d; binaries are not cached", path,
                    (long long)sb.st_size, DBI_KEY_BYTES);
  size_t got = 0;
  while (got < DBI_KEY_BYTES) {
    ssize_t r = read(fd, key + got, DBI_KEY_BYTES - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return dbi_fail(err, errlen, "cannot read the key %s", path);
    got += (size_t)r;
  }
  return 0;
}

static int open_key(const char *path) {
  /* O_NONBLOCK: a FIFO put there must not hang the open; read_key refuses it. */
  return open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
}

static int load_key(unsigned char *key, char *err, size_t errlen) {
  char path[4096];
  if (sodium_init() < 0) return dbi_fail(err, errlen, "libsodium cannot start");
  if (key_path(path, sizeof path, err, errlen) != 0 || check_folder(path, err, errlen) != 0)
    return -1;
  int fd = open_key(path);
  if (fd < 0 && errno == ENOENT) {
    if (create_key(path, err, errlen) != 0) return -1;
    fd = open_key(path);
  }
  if (fd < 0 && errno == ELOOP)
    return dbi_fail(err, errlen, "key %s is a symbolic link; binaries are not cached", path);
  if (fd < 0) return dbi_fail(err, errlen, "cannot open the key %s: %s", path, strerror(errno));
  int rc = read_key(fd, path, key, err, errlen);
  if (close(fd) != 0 && rc == 0) rc = dbi_fail(err, errlen, "cannot close the key %s", path);
  return rc;
}

int dbi_key(db *d, char *err, size_t errlen) {
  if (d->key_state == 0)
    d->key_state = load_key(d->key, d->key_err, sizeof d->key_err) == 0 ? 1 : -1;
  return d->key_state > 0 ? 0 : dbi_fail(err, errlen, "%s", d->key_err);
}

void dbi_key_forget(db *d) { sodium_memzero(d->key, sizeof d->key); }

/* ---- The MAC ---- */

/* One field, its length first (8 bytes, little-endian), so that no two
** different tuples of fields read as the same bytes. */
static int absorb(crypto_generichash_state *st, const void *p, size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  return crypto_generichash_update(st, len, sizeof len) == 0 &&
         crypto_generichash_update(st, p, n) == 0 ? 0 : -1;
}

int dbi_mac(const db *d, const db_binary_key *k, const void *blob, size_t n,
            unsigned char mac[DBI_MAC_BYTES]) {
  crypto_generichash_state st;
  const char *fields[] = {domain, k->source_hash, k->target, k->compiler_version, k->options};
  int rc = crypto_generichash_init(&st, d->key, DBI_KEY_BYTES, DBI_MAC_BYTES) == 0 ? 0 : -1;
  for (size_t i = 0; rc == 0 && i < sizeof fields / sizeof fields[0]; i++)
    rc = absorb(&st, fields[i], strlen(fields[i]));
  if (rc == 0) rc = absorb(&st, blob, n);
  if (rc == 0 && crypto_generichash_final(&st, mac, DBI_MAC_BYTES) != 0) rc = -1;
  sodium_memzero(&st, sizeof st);
  return rc;
}

int dbi_mac_verify(const db *d, const db_binary_key *k, const void *blob, size_t n,
                   const void *mac, size_t maclen) {
  unsigned char want[DBI_MAC_BYTES];
  return maclen == DBI_MAC_BYTES && dbi_mac(d, k, blob, n, want) == 0 &&
         sodium_memcmp(want, mac, DBI_MAC_BYTES) == 0;
}
