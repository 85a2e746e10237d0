// Test-only LD_PRELOAD library that plays someone who can write the bundle
// folder. Right before the loader dlopen()s its first op library (the first
// dlopen of a file path rather than a library name, by which time the loader
// has verified its files), it renames each SRC over DST listed in
// $MY_OPS_SWAP ("SRC=DST;SRC=DST"), and records that it did in
// $MY_OPS_SWAP_DONE. A loader that reopens a verified file by its path then
// loads the replacement.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int swapped;

static void swap_files(void) {
  const char* spec = getenv("MY_OPS_SWAP");
  if (spec == NULL) return;
  char* copy = strdup(spec);
  char* save = NULL;
  for (char* pair = strtok_r(copy, ";", &save); pair != NULL; pair = strtok_r(NULL, ";", &save)) {
    char* eq = strchr(pair, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    if (rename(pair, eq + 1) != 0) perror("swap_on_dlopen: rename");
  }
  free(copy);
  const char* done = getenv("MY_OPS_SWAP_DONE");
  if (done != NULL) {
    FILE* f = fopen(done, "w");
    if (f != NULL) fclose(f);
  }
}

void* dlopen(const char* file, int mode) {
  static void* (*real_dlopen)(const char*, int);
  if (real_dlopen == NULL) real_dlopen = (void* (*)(const char*, int))dlsym(RTLD_NEXT, "dlopen");
  if (!swapped && file != NULL && strchr(file, '/') != NULL) {
    swapped = 1;
    swap_files();
  }
  return real_dlopen(file, mode);
}
