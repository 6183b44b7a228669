/*
** template_files.h
** The templates folder, embedded in the binary at build time.
*/
#ifndef TEMPLATE_FILES_H
#define TEMPLATE_FILES_H

#include <stddef.h>

typedef struct template_file {
  const char *name;  /* path within templates/ ("<family>/<family>.lua"), or a file name */
  const char *text;  /* NUL-terminated */
  size_t size;
} template_file;

extern const template_file template_files[];  /* ends with a NULL name */

#endif
