/*
** par.c
** The parallel for loop of par.h.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "par.h"

typedef struct par_loop {
  size_t n;
  atomic_size_t next;        /* the next index to hand out */
  pthread_mutex_t lock;      /* guards done and the progress calls */
  size_t done;
  par_body_fn body;
  void *ud;
  par_progress_fn progress;
  void *pud;
} par_loop;

int par_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) return 1;
  if (n > 4096) return 4096;
  return (int)n;
}

static void *par_worker(void *arg) {
  par_loop *p = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&p->next, 1);
    if (i >= p->n) break;
    p->body(i, p->ud);
    /* Locking a valid default mutex cannot fail; were it to, only one
    ** progress call would be lost. */
    if (pthread_mutex_lock(&p->lock) != 0) continue;
    p->done++;
    if (p->progress) p->progress(p->done, p->n, p->pud);
    pthread_mutex_unlock(&p->lock);
  }
  return NULL;
}

int par_for(size_t n, int threads, par_body_fn body, void *ud, par_progress_fn progress,
            void *pud) {
  if (n == 0) return 0;
  if (threads <= 0) threads = par_cores();
  if ((size_t)threads > n) threads = (int)n;
  par_loop p = {.n = n, .body = body, .ud = ud, .progress = progress, .pud = pud};
  atomic_init(&p.next, 0);
  if (pthread_mutex_init(&p.lock, NULL) != 0) return -1;
  pthread_t *tids = threads > 1 ? malloc(sizeof *tids * (size_t)(threads - 1)) : NULL;
  int started = 0;
  for (int i = 0; tids && i < threads - 1; i++) {
    if (pthread_create(&tids[started], NULL, par_worker, &p) != 0) break;
    started++;
  }
  par_worker(&p);
  /* Join fails only for a bad thread id, which ours never are. */
  for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
  free(tids);
  pthread_mutex_destroy(&p.lock);
  return 0;
}
