/*
** cuda_driver.h
** The CUDA driver, loaded with dlopen at run time, so that fatune starts on
** machines with no driver and says so plainly.
*/
#ifndef CUDA_DRIVER_H
#define CUDA_DRIVER_H

#include <stddef.h>

#include "backend.h"

/* The GPU's description is the backend interface's own (backend.h). */
typedef fa_device cudrv_device_info;

/* Load libcuda.so.1 and initialise it. Returns the number of devices (>= 1),
** or 0 with a one-line reason in msg ("no CUDA driver: libcuda.so.1 not
** found", "CUDA driver found but no GPU: ..."). */
int cudrv_probe(char *msg, size_t msglen);

/* Query device `ordinal` after a successful probe. 0 or -1 with msg. */
int cudrv_device_query(int ordinal, cudrv_device_info *info, char *msg, size_t msglen);

/* Probe and query device 0 in a short-lived child process, so that this
** process never initialises CUDA: a context does not survive fork, and the
** tuner forks its workers. Returns 1 with info filled, or 0 with the reason
** in msg (no driver, no GPU, or the probe itself crashed). */
int cudrv_probe_isolated(cudrv_device_info *info, char *msg, size_t msglen);
/* The same for device `ordinal`. */
int cudrv_probe_isolated_at(int ordinal, cudrv_device_info *info, char *msg, size_t msglen);

/* The plain arch of a device, "sm_XY" from its compute capability; the
** generator says which arch fatune targets it as (gen_device_arch: the
** arch-specific one where a family runs only there). Returns buf. */
const char *cudrv_target_arch(const cudrv_device_info *d, char *buf, size_t n);

/* The ordinal of the device whose context is current on the calling thread
** (the driver probed in this process). 0, or -1 with the reason in msg when
** there is no driver or no current context. */
int cudrv_current_device(int *ordinal, char *msg, size_t msglen);

/* The driver entry points the cuda backend uses, after a successful probe
** in this process; NULL before. */
typedef struct cudrv_api cudrv_api;
const cudrv_api *cudrv_api_get(void);

/* "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" into buf. */
const char *cudrv_error(int rc, const char *call, char *buf, size_t len);

#endif
