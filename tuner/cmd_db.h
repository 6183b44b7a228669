/*
** cmd_db.h
** fatune best, show, export and merge: the results database from the
** command line.
*/
#ifndef CMD_DB_H
#define CMD_DB_H

#include "cli.h"

/* Returns the command's exit status: 2 for bad input, 1 when the database
** cannot be opened or holds nothing for the question. */
int cmd_db_main(const cli_opts *o);
/* fatune baseline FILE.csv (cmd_baseline.c): PyTorch's times into the database. */
int cmd_baseline_main(const cli_opts *o);

#endif
