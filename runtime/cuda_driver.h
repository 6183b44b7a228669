/*
** cuda_driver.h
** The CUDA driver, loaded with dlopen at run time, so that fatune starts on
** machines with no driver and says so plainly.
*/
#ifndef CUDA_DRIVER_H
#define CUDA_DRIVER_H

#include <stddef.h>

typedef struct cudrv_device_info {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  int smem_per_block_optin;   /* bytes */
  int max_threads_per_block;
} cudrv_device_info;

/* Load libcuda.so.1 and initialise it. Returns the number of devices (>= 1),
** or 0 with a one-line reason in msg ("no CUDA driver: libcuda.so.1 not
** found", "CUDA driver found but no GPU: ..."). */
int cudrv_probe(char *msg, size_t msglen);

/* Query device `ordinal` after a successful probe. 0 or -1 with msg. */
int cudrv_device_query(int ordinal, cudrv_device_info *info, char *msg, size_t msglen);

#endif
