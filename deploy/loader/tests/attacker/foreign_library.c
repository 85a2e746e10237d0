// Test-only shared library standing in for code nobody vouched for: loading
// it creates the file named by $MY_OPS_FOREIGN_MARKER.
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void mark_loaded(void) {
  const char* marker = getenv("MY_OPS_FOREIGN_MARKER");
  if (marker == NULL) return;
  FILE* f = fopen(marker, "w");
  if (f != NULL) fclose(f);
}
