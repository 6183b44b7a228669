/*
** fa_status.h
** What went wrong, as every layer reports it: functions that can fail for
** more than one reason return FA_OK or one of these (with a message in
** their err buffer), so the library can tell its caller which it was, as
** Lua's LUA_ERRMEM or SQLite's SQLITE_NOTADB do. Callers that only need to
** know whether it worked test for != 0.
**
** The values are libfatune's fatune_status values (include/fatune.h).
*/
#ifndef FA_STATUS_H
#define FA_STATUS_H

typedef enum fa_status {
  FA_OK = 0,
  FA_EINVAL,     /* a bad argument, name, config or input */
  FA_ENODEV,     /* no such backend here: no driver, no GPU */
  FA_EDB,        /* a database that cannot be opened, read or written */
  FA_ECOMPILE,   /* a kernel that does not compile */
  FA_ELAUNCH,    /* a kernel that failed to run, or a device error */
  FA_ENOMEM,     /* out of host or device memory */
  FA_EINTERNAL   /* fatune's own parts are broken (its templates), or a thread would not start */
} fa_status;

#endif
