/*
** worker.h
** Jobs run in a child process, so that one that takes the process down (an
** illegal address, a sticky CUDA error, a segfault, an abort) or never ends
** costs only itself: the child is killed or buried, a fresh one takes the
** next job, and the run goes on.
**
** The child is forked from the caller and inherits its memory: compiled
** emulator modules, inputs, everything the job function reads. A CUDA
** context does not survive a fork, so the parent must never initialise
** CUDA itself; the child does, on its first job.
*/
#ifndef WORKER_H
#define WORKER_H

#include <stddef.h>

typedef enum wk_outcome { WK_DONE, WK_CRASHED, WK_TIMEOUT, WK_ERROR } wk_outcome;

/* Runs in the child: do job i and fill out, result_size bytes that travel
** back to the parent as they are (no pointers). A non-zero return retires
** the child after this answer (its device is unusable, say): the next job
** gets a fresh one. */
typedef int (*wk_job_fn)(size_t i, void *ud, void *out);

typedef struct wk_worker wk_worker;

/* A worker for jobs of fn; no process is started until the first job. */
int wk_open(wk_worker **out, wk_job_fn fn, void *ud, size_t result_size, char *err,
            size_t errlen);

/* Start the child now, if there is none. Fork from one thread when you
** can: a thread starting (ASan's allocator) or allocating when another
** forks can leave the child waiting on a lock no one in it will release.
** Forks are serialised, and wait for wk_quiet_begin's holders. */
int wk_start(wk_worker *w, char *why, size_t whylen);

/* Around work on another thread that may hold a lock a child needs
** (writing the database, say): no fork starts until wk_quiet_end. */
void wk_quiet_begin(void);
void wk_quiet_end(void);

/* Run job i in the worker's child, starting one if there is none, and wait
** up to timeout_s seconds. WK_DONE: out holds the result. WK_CRASHED,
** WK_TIMEOUT: why says what happened ("killed by signal 11 (Segmentation
** fault)", "no answer after 60 s: killed"), and the child is gone. WK_ERROR:
** no child could be started (why says so). */
wk_outcome wk_run(wk_worker *w, size_t i, int timeout_s, void *out, char *why, size_t whylen);

/* In a job: what it is doing now, a number of the caller's own. When the
** child dies or hangs, the parent reads the last one said (each job starts
** at 0) with wk_last_phase: was it the job's own work, or its setting up? */
void wk_phase(int phase);
int wk_last_phase(const wk_worker *w);

/* Stop the child (if any) and free the worker. */
void wk_close(wk_worker *w);

#endif
