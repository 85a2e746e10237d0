// Prints, one per line, "<flag> 0|1" for the CPUID feature bits that define the x86-64 kernel
// tiers (named as /proc/cpuinfo names them), twice: before and after the program installs a
// SIGSEGV handler of its own through sigaction(), then through signal(); after each, whether a
// real fault still reaches that handler.
#include <cpuid.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static sigjmp_buf recover;
static void on_fault(int sig) {
  (void)sig;
  siglongjmp(recover, 1);
}

// The null store is the point: left uninstrumented, so that a sanitizer build faults too.
__attribute__((no_sanitize("address", "undefined"))) static void fault(void) {
  if (sigsetjmp(recover, 1) == 0) {
    *(volatile int*)0 = 1;
    puts("fault not raised");
  } else {
    puts("fault reached the program's handler");
  }
}

static void print_flags(const char* when) {
  unsigned a, b, c, d, l1c;
  __cpuid(1, a, b, l1c, d);
  __cpuid_count(7, 0, a, b, c, d);
  const struct {
    const char* name;
    unsigned reg, bit;
  } flags[] = {
      {"fma", l1c, 12},         {"f16c", l1c, 29},        {"avx", l1c, 28},
      {"avx2", b, 5},           {"avx512f", b, 16},       {"avx512bw", b, 30},
      {"avx512vl", b, 31},      {"avx512_vnni", c, 11},   {"amx_tile", d, 24},
      {"amx_int8", d, 25},
  };
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i) {
    printf("%s %s %u\n", when, flags[i].name, (flags[i].reg >> flags[i].bit) & 1u);
  }
}

int main(void) {
  print_flags("start");
  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_handler = on_fault;
  sigaction(SIGSEGV, &act, NULL);
  print_flags("own-handler");
  fault();
  signal(SIGSEGV, SIG_DFL);
  signal(SIGSEGV, on_fault);
  print_flags("signal-handler");
  fault();
  return 0;
}
