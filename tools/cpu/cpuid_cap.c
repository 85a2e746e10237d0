// libcpuid_cap.so: an LD_PRELOAD library that makes an x86-64 CPU look like one of a lower
// kernel tier to every library in the process, by hiding the CPUID feature bits above it.
//
//   MY_OPS_CPUID_CAP=avx2 LD_PRELOAD=.../libcpuid_cap.so python3 -m ...
//
// Tiers: scalar (no AVX), avx2 (AVX2+FMA+F16C: AMD Zen 2/3), avx512 (F/CD/BW/DQ/VL:
// Skylake-SP), avx512_vnni (no AMX: Cascade Lake, Zen 4), amx (nothing hidden).
// ONNX Runtime, XNNPACK, oneDNN and PyTorch pick their kernels from CPUID and have no
// switch of their own; this is how a bench on an AVX-512 machine runs them as on an AVX2 one.
//
// Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, CPU flag cpuid_fault) makes every
// CPUID instruction raise SIGSEGV; the handler runs the real one, masks its answer and steps
// over it. The setting is inherited by threads and forks; execve resets it and the
// constructor sets it again. glibc's own choice of memcpy, made before any constructor, and
// XGETBV are not masked: libraries test CPUID's bits before they read XCR0.
// On other architectures the library is empty.
#if defined(__x86_64__)
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define CAP_ENV "MY_OPS_CPUID_CAP"

// Bits hidden at each tier, by CPUID leaf 7 sub-leaf 0 (EBX, ECX, EDX) and sub-leaf 1 (EAX,
// EDX), and leaf 1 (ECX) and leaf 7.0 EBX's AVX2 bit for scalar.
struct hidden {
  uint32_t l1_ecx, l7_ebx, l7_ecx, l7_edx, l7s1_eax, l7s1_edx;
};

#define BIT(n) (1u << (n))
// AMX (tile, int8, bf16; leaf 7.1: fp16) and the VEX extensions of later cores.
#define AMX_EDX (BIT(22) | BIT(24) | BIT(25))
#define AMX_S1_EAX BIT(21)
// AVX-512 beyond Skylake-SP's F/CD/BW/DQ/VL: IFMA, VBMI, VBMI2, VNNI, BITALG, VPOPCNTDQ,
// 4VNNIW, 4FMAPS, VP2INTERSECT, FP16, BF16; AVX10.
#define AVX512_LATER_EBX BIT(21)
#define AVX512_LATER_ECX (BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14))
#define AVX512_LATER_EDX (BIT(2) | BIT(3) | BIT(8) | BIT(23))
#define AVX512_LATER_S1_EAX BIT(5)
#define AVX10_S1_EDX BIT(19)
// AVX-512 F, DQ, PF, ER, CD, BW, VL.
#define AVX512_BASE_EBX (BIT(16) | BIT(17) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31))
// VEX-encoded AVX-VNNI, AVX-IFMA, AVX-VNNI-INT8, AVX-NE-CONVERT, AVX-VNNI-INT16 (Alder Lake
// and later): not in Zen 2/3 or Skylake, so hidden below avx512_vnni.
#define AVX_VEX_LATER_S1_EAX (BIT(4) | BIT(23))
#define AVX_VEX_LATER_S1_EDX (BIT(4) | BIT(5) | BIT(10))
// AVX, FMA, F16C (leaf 1 ECX) and AVX2 (leaf 7 EBX).
#define AVX_L1_ECX (BIT(28) | BIT(12) | BIT(29))
#define AVX2_EBX BIT(5)

static const struct {
  const char* name;
  struct hidden hide;
} tiers[] = {
    {"scalar",
     {AVX_L1_ECX, AVX2_EBX | AVX512_BASE_EBX | AVX512_LATER_EBX, AVX512_LATER_ECX,
      AVX512_LATER_EDX | AMX_EDX, AVX512_LATER_S1_EAX | AMX_S1_EAX | AVX_VEX_LATER_S1_EAX,
      AVX10_S1_EDX | AVX_VEX_LATER_S1_EDX}},
    {"avx2",
     {0, AVX512_BASE_EBX | AVX512_LATER_EBX, AVX512_LATER_ECX, AVX512_LATER_EDX | AMX_EDX,
      AVX512_LATER_S1_EAX | AMX_S1_EAX | AVX_VEX_LATER_S1_EAX,
      AVX10_S1_EDX | AVX_VEX_LATER_S1_EDX}},
    {"avx512",
     {0, AVX512_LATER_EBX, AVX512_LATER_ECX, AVX512_LATER_EDX | AMX_EDX,
      AVX512_LATER_S1_EAX | AMX_S1_EAX | AVX_VEX_LATER_S1_EAX,
      AVX10_S1_EDX | AVX_VEX_LATER_S1_EDX}},
    {"avx512_vnni", {0, 0, 0, AMX_EDX, AMX_S1_EAX, AVX10_S1_EDX}},
    {"amx", {0, 0, 0, 0, 0, 0}},
};

static struct hidden hide;
static int capping;  // the handler is installed and CPUID faults
static struct sigaction program_handler;  // the program's own SIGSEGV handler, chained to
typedef int (*sigaction_fn)(int, const struct sigaction*, struct sigaction*);
typedef sighandler_t (*signal_fn)(int, sighandler_t);

// libc's own sigaction and signal, behind ours; looked up once, on first use (a library's
// constructor may set a handler before this one's runs).
static sigaction_fn libc_sigaction(void) {
  static sigaction_fn fn;
  if (fn == NULL) fn = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  return fn;
}

static signal_fn libc_signal(void) {
  static signal_fn fn;
  if (fn == NULL) fn = (signal_fn)dlsym(RTLD_NEXT, "signal");
  return fn;
}

static long set_cpuid_enabled(int enabled) {
  return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled);
}

static void chain(int sig, siginfo_t* info, void* context) {
  if (program_handler.sa_flags & SA_SIGINFO) {
    program_handler.sa_sigaction(sig, info, context);
    return;
  }
  if (program_handler.sa_handler != SIG_DFL && program_handler.sa_handler != SIG_IGN) {
    program_handler.sa_handler(sig);
    return;
  }
  // The default action (a fault's SIGSEGV cannot be ignored): die of it, as the program would.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  libc_sigaction()(sig, &dfl, NULL);
  raise(sig);
}

static void on_segv(int sig, siginfo_t* info, void* context) {
  ucontext_t* uc = (ucontext_t*)context;
  greg_t* regs = uc->uc_mcontext.gregs;
  const uint8_t* ip = (const uint8_t*)regs[REG_RIP];
  // CPUID faulting raises SIGSEGV with si_code SI_KERNEL at the instruction (0F A2).
  if (info->si_code != SI_KERNEL || ip[0] != 0x0F || ip[1] != 0xA2) {
    chain(sig, info, context);
    return;
  }
  uint32_t leaf = (uint32_t)regs[REG_RAX], sub = (uint32_t)regs[REG_RCX];
  uint32_t a, b, c, d;
  set_cpuid_enabled(1);
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(leaf), "c"(sub));
  set_cpuid_enabled(0);
  if (leaf == 1) {
    c &= ~hide.l1_ecx;
  } else if (leaf == 7 && sub == 0) {
    b &= ~hide.l7_ebx;
    c &= ~hide.l7_ecx;
    d &= ~hide.l7_edx;
  } else if (leaf == 7 && sub == 1) {
    a &= ~hide.l7s1_eax;
    d &= ~hide.l7s1_edx;
  }
  regs[REG_RAX] = a;
  regs[REG_RBX] = b;
  regs[REG_RCX] = c;
  regs[REG_RDX] = d;
  regs[REG_RIP] += 2;
}

// The program's sigaction for SIGSEGV becomes the handler chained to: ours stays installed.
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig != SIGSEGV || !capping) return libc_sigaction()(sig, act, old);
  if (old != NULL) *old = program_handler;
  if (act != NULL) program_handler = *act;
  return 0;
}

// glibc's signal() sets the handler without going through sigaction's symbol: the same here.
// (GCC's cc1plus sets its crash handler so, and GMP then runs CPUID on first use.)
sighandler_t signal(int sig, sighandler_t handler) {
  if (sig != SIGSEGV || !capping) return libc_signal()(sig, handler);
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;
  sigemptyset(&act.sa_mask);
  sigaction(sig, &act, &old);
  return old.sa_handler;
}

static void die(const char* what) {
  fprintf(stderr, "libcpuid_cap: %s\n", what);
  _exit(2);
}

__attribute__((constructor)) static void cap_cpuid(void) {
  const char* cap = getenv(CAP_ENV);
  if (cap == NULL || *cap == '\0') return;
  size_t i = 0;
  for (; i < sizeof tiers / sizeof tiers[0]; ++i) {
    if (strcmp(cap, tiers[i].name) == 0) break;
  }
  if (i == sizeof tiers / sizeof tiers[0]) {
    char line[200];
    snprintf(line, sizeof line,
             CAP_ENV "=%.40s: not a tier (scalar, avx2, avx512, avx512_vnni, amx)", cap);
    die(line);
  }
  hide = tiers[i].hide;
  if (memcmp(&hide, &(struct hidden){0}, sizeof hide) == 0) return;  // amx: nothing to hide

  struct sigaction act;
  memset(&act, 0, sizeof act);
  act.sa_sigaction = on_segv;
  // SA_ONSTACK: on the alternate stack where a program set one (a stack overflow's SIGSEGV
  // reaches its handler only there); without one the kernel uses the current stack.
  act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&act.sa_mask);
  if (libc_sigaction()(SIGSEGV, &act, &program_handler) != 0) die("cannot install a SIGSEGV handler");
  if (set_cpuid_enabled(0) != 0) {
    die(CAP_ENV ": this kernel or CPU has no CPUID faulting (arch_prctl ARCH_SET_CPUID), "
               "so the features above the tier cannot be hidden");
  }
  capping = 1;
}
#endif  // __x86_64__
