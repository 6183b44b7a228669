/*
** fiber.h
** Cooperative fibers: a stack, a saved context and a switch. On x86-64 the
** switch is a few instructions (callee-saved registers, the stack pointer,
** MXCSR and the x87 control word); elsewhere it is ucontext. Under
** AddressSanitizer every switch is announced, so ASan follows the stacks.
*/
#ifndef FIBER_H
#define FIBER_H

#include <stddef.h>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

typedef struct fiber {
  void *stack;        /* lowest address; NULL for a thread's own stack */
  size_t stack_size;
#if defined(__x86_64__)
  void *sp;           /* saved stack pointer while switched out */
#else
  ucontext_t uc;
#endif
} fiber;

/* A fiber's first switch-in runs fn(arg) on its stack. fn must never
** return: it ends by switching away for good with fiber_exit. */
typedef void (*fiber_fn)(void *arg);

/* Make f start fn(arg) on [stack, stack + size). */
void fiber_make(fiber *f, void *stack, size_t size, fiber_fn fn, void *arg);

/* Save the running context in from and resume to. */
void fiber_switch(fiber *from, fiber *to);

/* As fiber_switch, for a fiber that will never be resumed. */
void fiber_exit(fiber *from, fiber *to);

/* Called first thing in fn: completes the switch that started it. */
void fiber_started(void);

#endif
