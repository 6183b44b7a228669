/*
** fiber.c
** The context switch behind fiber.h.
*/
#include <stdint.h>
#include <string.h>

#include "fiber.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define FIBER_ASAN 1
#else
#define FIBER_ASAN 0
#endif

#if defined(__x86_64__)

void fiber_switch_asm(void **save_sp, void *load_sp);
void fiber_entry_asm(void);

/* fiber_switch_asm pushes the callee-saved registers and the two floating
** point control words, swaps stack pointers and pops the other side's.
** A new fiber's stack is laid out so that the pops land in
** fiber_entry_asm with fn in r13 and arg in r12. */
__asm__(
  ".text\n"
  ".p2align 4\n"
  ".globl fiber_switch_asm\n"
  ".hidden fiber_switch_asm\n"
  ".type fiber_switch_asm,@function\n"
  "fiber_switch_asm:\n"
  "  pushq %rbp\n"
  "  pushq %rbx\n"
  "  pushq %r12\n"
  "  pushq %r13\n"
  "  pushq %r14\n"
  "  pushq %r15\n"
  "  subq $8, %rsp\n"
  "  stmxcsr (%rsp)\n"
  "  fnstcw 4(%rsp)\n"
  "  movq %rsp, (%rdi)\n"
  "  movq %rsi, %rsp\n"
  "  ldmxcsr (%rsp)\n"
  "  fldcw 4(%rsp)\n"
  "  addq $8, %rsp\n"
  "  popq %r15\n"
  "  popq %r14\n"
  "  popq %r13\n"
  "  popq %r12\n"
  "  popq %rbx\n"
  "  popq %rbp\n"
  "  ret\n"
  ".size fiber_switch_asm, .-fiber_switch_asm\n"
  ".p2align 4\n"
  ".globl fiber_entry_asm\n"
  ".hidden fiber_entry_asm\n"
  ".type fiber_entry_asm,@function\n"
  "fiber_entry_asm:\n"
  "  movq %r12, %rdi\n"
  "  callq *%r13\n"
  "  ud2\n"
  ".size fiber_entry_asm, .-fiber_entry_asm\n");

void fiber_make(fiber *f, void *stack, size_t size, fiber_fn fn, void *arg) {
  f->stack = stack;
  f->stack_size = size;
  /* The return address sits at 8 mod 16 so that fiber_entry_asm runs with
  ** the stack aligned as after a call's return, and its call of fn is
  ** aligned as the ABI wants. */
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  uint64_t *slot = (uint64_t *)(top - 8);
  slot[0] = (uint64_t)(uintptr_t)fiber_entry_asm;  /* ret */
  slot[-1] = 0;                                    /* rbp */
  slot[-2] = 0;                                    /* rbx */
  slot[-3] = (uint64_t)(uintptr_t)arg;             /* r12 */
  slot[-4] = (uint64_t)(uintptr_t)fn;              /* r13 */
  slot[-5] = 0;                                    /* r14 */
  slot[-6] = 0;                                    /* r15 */
  uint32_t words[2] = {0x1F80u, 0x037Fu};          /* MXCSR, x87 control word: defaults */
  memcpy(&slot[-7], words, sizeof words);
  f->sp = &slot[-7];
}

static void raw_switch(fiber *from, fiber *to) { fiber_switch_asm(&from->sp, to->sp); }

#else

static void uc_entry(unsigned hi_fn, unsigned lo_fn, unsigned hi_arg, unsigned lo_arg) {
  fiber_fn fn = (fiber_fn)(uintptr_t)(((uint64_t)hi_fn << 32) | lo_fn);
  void *arg = (void *)(uintptr_t)(((uint64_t)hi_arg << 32) | lo_arg);
  fn(arg);
}

void fiber_make(fiber *f, void *stack, size_t size, fiber_fn fn, void *arg) {
  f->stack = stack;
  f->stack_size = size;
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = stack;
  f->uc.uc_stack.ss_size = size;
  f->uc.uc_link = NULL;
  uint64_t pf = (uint64_t)(uintptr_t)fn, pa = (uint64_t)(uintptr_t)arg;
  makecontext(&f->uc, (void (*)(void))uc_entry, 4, (unsigned)(pf >> 32), (unsigned)pf,
              (unsigned)(pa >> 32), (unsigned)pa);
}

static void raw_switch(fiber *from, fiber *to) { swapcontext(&from->uc, &to->uc); }

#endif

#if FIBER_ASAN
/* The stack of the thread the fibers were started from, as ASan reports it
** when the first fiber starts; fibers never migrate between threads. */
static _Thread_local const void *home_bottom;
static _Thread_local size_t home_size;

static void announce(fiber *to, void **fake) {
  const void *bottom = to->stack ? to->stack : home_bottom;
  size_t size = to->stack ? to->stack_size : home_size;
  __sanitizer_start_switch_fiber(fake, bottom, size);
}

void fiber_started(void) {
  const void *bottom;
  size_t size;
  __sanitizer_finish_switch_fiber(NULL, &bottom, &size);
  if (!home_bottom) home_bottom = bottom, home_size = size;
}

void fiber_switch(fiber *from, fiber *to) {
  void *fake = NULL;
  announce(to, &fake);
  raw_switch(from, to);
  __sanitizer_finish_switch_fiber(fake, NULL, NULL);
}

void fiber_exit(fiber *from, fiber *to) {
  announce(to, NULL);
  raw_switch(from, to);
}
#else
void fiber_started(void) {}
void fiber_switch(fiber *from, fiber *to) { raw_switch(from, to); }
void fiber_exit(fiber *from, fiber *to) { raw_switch(from, to); }
#endif
