/* A jump table whose base is set before a loop whose header has many ways in, the shape of
 * sqlite3's `sqlite3_complete` under clang -O2 PIE: `lea T(%rip), %r15` before the loop,
 * then in the loop `movslq (%r15,%rax,4), %rdx; add %r15, %rdx; jmp *%rdx`, and the
 * default's chain of compares going back to the loop's latch in 30 ways. Walking back from
 * the jump, the header's way in from the latch leads into the chain in 30 paths before the
 * way in from the entry that sets the base: a walk that enumerates paths gives up first.
 *
 * classify(s): over the bytes of s, adds 10+b for b below 4 (through the table), and b-100
 * for b from 100 to 129 (through the chain).
 */
#include <stdio.h>

int classify(const unsigned char *);

__asm__(
    ".text\n"
    ".globl classify\n.type classify,@function\n"
    "classify:\n"
    "  push %r15\n"
    "  xor %ecx, %ecx\n"
    "  lea .Ltab_loop(%rip), %r15\n"
    "  jmp .Lhead\n"
    ".Llatch:\n"
    "  add $1, %rdi\n"
    ".Lhead:\n"
    "  movzbl (%rdi), %eax\n"
    "  test %eax, %eax\n"
    "  je .Lout\n"
    "  cmp $3, %eax\n"
    "  ja .Ldefault\n"
    "  movslq (%r15,%rax,4), %rdx\n"
    "  add %r15, %rdx\n"
    "  jmp *%rdx\n"
    ".Lc0: add $10, %ecx\n  jmp .Llatch\n"
    ".Lc1: add $11, %ecx\n  jmp .Llatch\n"
    ".Lc2: add $12, %ecx\n  jmp .Llatch\n"
    ".Lc3: add $13, %ecx\n  jmp .Llatch\n"
    ".Ldefault:\n"
    ".irp n,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29\n"
    "  cmp $100+\\n, %eax\n"
    "  jne .Lnot\\n\n"
    "  add $\\n, %ecx\n"
    "  jmp .Llatch\n"
    ".Lnot\\n:\n"
    ".endr\n"
    "  jmp .Llatch\n"
    ".Lout:\n"
    "  mov %ecx, %eax\n"
    "  pop %r15\n"
    "  ret\n"
    ".size classify, .-classify\n"
    ".section .rodata\n"
    ".p2align 2\n"
    ".Ltab_loop: .long .Lc0-.Ltab_loop, .Lc1-.Ltab_loop, .Lc2-.Ltab_loop, .Lc3-.Ltab_loop\n"
    ".text\n");

int main(int argc, char **argv) {
    const unsigned char s[] = {1, 3, 129, 0};
    printf("%d\n", classify(argc > 1 ? (const unsigned char *)argv[1] : s));
    return 0;
}
