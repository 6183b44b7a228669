/*
** suite.h
** The adversarial suite: inputs that break attention kernels in the
** field, defined once, met by every variant at validation (trial.c) and
** by the tests (test_suite). Each case is a problem derived from the one
** tuned (its lengths; the same dtype, head dim, mask and op) and a shape
** of its inputs, checked against the float64 reference like any case.
** README: Validation lists the cases and why each is there.
*/
#ifndef SUITE_H
#define SUITE_H

#include "validate.h"

/* How many cases there are; case i's name ("outlier") and what it is. */
int val_suite_size(void);
const char *val_suite_name(int i);
const char *val_suite_what(int i);

/* Case i's problem for p into *out: 1, or 0 where the case does not apply
** (a case of the causal mask, for a kernel without it). */
int val_suite_problem(int i, const fa_problem *p, fa_problem *out);

/* Case i for p: its problem, inputs and reference (val_case_make_shaped);
** 0 where it applies, 1 where it does not (c left empty), -1 on failure. */
int val_suite_make(val_case *c, int i, const fa_problem *p, unsigned long long seed, char *err,
                   size_t errlen);

#endif
