/* Functions gcc splits into a hot part and a `.cold` part at -O2 (a path calling a `cold`
   function is moved away): gsh's tests of cold parts in stripped binaries and the ground truth
   (`cargo run -p xtask -- ground-truth`) compile it. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((cold, noinline)) void complain(const char *what, long v) {
    fprintf(stderr, "%s: %ld\n", what, v);
}

__attribute__((cold, noinline, noreturn)) void die(const char *what) {
    fprintf(stderr, "fatal: %s\n", what);
    exit(3);
}

/* The cold path rejoins the loop: the cold part jumps back into its parent. */
__attribute__((noinline)) long sum_positive(const long *a, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] < 0) {
            complain("negative", a[i]);
            s -= 2 * a[i];
            continue;
        }
        s += a[i];
    }
    return s;
}

/* The cold path never comes back. */
__attribute__((noinline)) int checked_div(int a, int b) {
    if (b == 0)
        die("division by zero");
    return a / b;
}

/* gcc's `f.part.0` with its isolated null dereference (sqlite3's
   `sqlite3_declare_vtab.part.0.cold`): a static function nothing calls, only tail-called by
   another, enters its cold part by `jmp`. Stripped, the parent is known only by its FDE, as a
   fragment would be; its fragment still belongs to it. */
int tail_caller(const int *);
__asm__(
    ".text\n"
    ".type tail_parent,@function\n"
    "tail_parent:\n"
    "  .cfi_startproc\n"
    "  sub $24, %rsp\n"
    "  .cfi_def_cfa_offset 32\n"
    "  test %rdi, %rdi\n"
    "  je .Ltail_null\n"
    "  mov (%rdi), %eax\n"
    "  add $24, %rsp\n"
    "  .cfi_remember_state\n"
    "  .cfi_def_cfa_offset 8\n"
    "  ret\n"
    ".Ltail_null:\n"
    "  .cfi_restore_state\n"
    "  jmp tail_parent.cold\n"
    "  .cfi_endproc\n"
    ".size tail_parent, .-tail_parent\n"
    ".globl tail_caller\n.type tail_caller,@function\n"
    "tail_caller:\n"
    "  .cfi_startproc\n"
    "  jmp tail_parent\n"
    "  .cfi_endproc\n"
    ".size tail_caller, .-tail_caller\n"
    ".type tail_parent.cold,@function\n"
    "tail_parent.cold:\n"
    "  .cfi_startproc\n"
    "  .cfi_def_cfa_offset 32\n"
    "  movzwl 0x5e, %eax\n"
    "  ud2\n"
    "  .cfi_endproc\n"
    ".size tail_parent.cold, .-tail_parent.cold\n");

/* A switch whose case jumps straight to the first instruction of its function's cold part
   (lua's `genlink`, `reallymarkobject`, `propagatemark`, `luaC_barrierback_` under gcc -O2
   send unreachable cases to `f.cold`): the table is still the function's. A PIE's table holds
   offsets from its start, a non-PIE's addresses, as gcc emits them. */
int sw_cold(int);
__asm__(
    ".text\n"
    ".globl sw_cold\n.type sw_cold,@function\n"
    "sw_cold:\n"
    "  .cfi_startproc\n"
    "  test %edi, %edi\n"
    "  js sw_cold.cold\n"
    "  cmp $2, %edi\n"
    "  ja .Lsw_def\n"
    "  mov %edi, %edi\n"
#ifdef __PIE__
    "  lea .Ltab_sw(%rip), %rdx\n"
    "  movslq (%rdx,%rdi,4), %rax\n"
    "  add %rdx, %rax\n"
    "  jmp *%rax\n"
#else
    "  jmp *.Ltab_sw(,%rdi,8)\n"
#endif
    ".Lsw0: mov $1, %eax\n  ret\n"
    ".Lsw1: mov $2, %eax\n  ret\n"
    ".Lsw_def: xor %eax, %eax\n  ret\n"
    /* Bytes no path runs that a linear decode reads as `je` into the middle of
       `tail_parent.cold` (python3.11's 0x460f19, out of step inside a `jmp`, "jumps" into
       `PyGILState_Ensure.cold`): a branch from another function that is none, which must not
       cost the cold part its parent. */
    "  .byte 0x0f, 0x84\n"
    "  .long tail_parent.cold + 8 - (. + 4)\n"
    "  .cfi_endproc\n"
    ".size sw_cold, .-sw_cold\n"
    ".type sw_cold.cold,@function\n"
    "sw_cold.cold:\n"
    "  .cfi_startproc\n"
    "  ud2\n"
    "  .cfi_endproc\n"
    ".size sw_cold.cold, .-sw_cold.cold\n"
    ".section .rodata\n"
    ".p2align 3\n"
    ".Ltab_sw:\n"
#ifdef __PIE__
    "  .long .Lsw0-.Ltab_sw, .Lsw1-.Ltab_sw, sw_cold.cold-.Ltab_sw\n"
#else
    "  .quad .Lsw0, .Lsw1, sw_cold.cold\n"
#endif
    ".text\n");

/* A cold part whose first block only another of its blocks enters: gcc orders a cold part's
   blocks freely, and its parent branches into its middle, never to its start (python3.11's
   cold part at 0x440f9c, entered at 0x440faa and on from its parent at 0x6378a0). Stripped,
   nothing branches to the fragment's start from outside; it is still its parent's. */
int mid_cold(const int *, int);
__asm__(
    ".text\n"
    ".globl mid_cold\n.type mid_cold,@function\n"
    "mid_cold:\n"
    "  .cfi_startproc\n"
    "  push %rbx\n"
    "  .cfi_def_cfa_offset 16\n"
    "  .cfi_offset 3, -16\n"
    "  mov %esi, %ebx\n"
    "  test %rdi, %rdi\n"
    "  je .Lmc_null\n"
    "  mov (%rdi), %eax\n"
    ".Lmc_done:\n"
    "  pop %rbx\n"
    "  .cfi_def_cfa_offset 8\n"
    "  ret\n"
    "  .cfi_endproc\n"
    ".size mid_cold, .-mid_cold\n"
    ".type mid_cold.cold,@function\n"
    "mid_cold.cold:\n"
    "  .cfi_startproc\n"
    "  .cfi_def_cfa_offset 16\n"
    "  .cfi_offset 3, -16\n"
    "  mov $-2, %eax\n"
    "  jmp .Lmc_done\n"
    ".Lmc_null:\n"
    "  test %ebx, %ebx\n"
    "  je mid_cold.cold\n"
    "  mov $-1, %eax\n"
    "  jmp .Lmc_done\n"
    "  .cfi_endproc\n"
    ".size mid_cold.cold, .-mid_cold.cold\n");

int main(int argc, char **argv) {
    long a[4] = {1, 2, 3, argc > 3 ? -4 : 4};
    long s = sum_positive(a, 4);
    printf("%ld %d %d\n", s, checked_div((int)s, argc), tail_caller(&argc) + sw_cold(argc > 2) + mid_cold(argc > 4 ? 0 : &argc, argc));
    return argv[0] == 0;
}
