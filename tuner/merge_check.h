/*
** merge_check.h
** What fatune merge takes of another file's variants, decided by the
** generator (the database renders no kernel): a config the templates
** render for the target asked, whose family, name and hash are those the
** generator gives it. For a row that names no target (the variant itself,
** a trial recorded before fatune kept them) it takes a config that renders
** for any target the space knows.
*/
#ifndef MERGE_CHECK_H
#define MERGE_CHECK_H

#include "db.h"
#include "gen.h"

typedef struct merge_check {
  gen_state *gen;     /* opened at the first row; NULL until then */
  gen_archs archs;    /* the space's targets, for a row that names none */
} merge_check;

/* The db_merge_accept that asks c; c starts zeroed and is closed with
** merge_check_close after the merge. */
db_merge_accept merge_check_accept(merge_check *c);
void merge_check_close(merge_check *c);

#endif
