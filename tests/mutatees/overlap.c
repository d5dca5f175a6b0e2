/* overlap.c: code that looks like padding to a neighbour. `pick`'s jump table has a case
 * (`pick_far`) past `pick`'s `.size`, and that case starts with eight executed `nop`s (as a
 * loop's alignment would); right after it comes `short_entry`, whose entry block is 4 bytes,
 * too short for a jump, so its point needs a pun into padding within 128 bytes. The only
 * nop run in reach is `pick_far`'s: a planner that takes bytes some CFG calls code for
 * padding writes the pun's jump over them, and `pick(1)` then runs `short_entry`'s
 * trampoline. `pick_far`'s own `ret` has no room for a jump either, so its exit competes for
 * the same bytes. Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

__asm__(".text\n"
        ".globl pick\n"
        ".type pick, @function\n"
        ".p2align 4\n"
        "pick:\n"
        "  cmpl $2, %edi\n"
        "  ja 1f\n"
        "  movl %edi, %edi\n"
        "  leaq pick_table(%rip), %rax\n"
        "  movslq (%rax,%rdi,4), %rdx\n"
        "  addq %rax, %rdx\n"
        "  jmp *%rdx\n"
        "pick_near:\n"
        "  movl $10, %eax\n"
        "  ret\n"
        "1:\n"
        "  movl $-1, %eax\n"
        "  ret\n"
        ".size pick, .-pick\n"
        "pick_far:\n"
        "  nop\n nop\n nop\n nop\n nop\n nop\n nop\n nop\n"
        "  movl $20, %eax\n"
        "  ret\n"
        ".globl short_entry\n"
        ".type short_entry, @function\n"
        "short_entry:\n"
        "  testl %edi, %edi\n"
        "  je 2f\n"
        "  leal 1(%rdi), %eax\n"
        "  ret\n"
        "2:\n"
        "  movl $100, %eax\n"
        "  ret\n"
        ".size short_entry, .-short_entry\n"
        ".section .rodata\n"
        ".p2align 2\n"
        "pick_table:\n"
        "  .long pick_near - pick_table\n"
        "  .long pick_far - pick_table\n"
        "  .long pick_near - pick_table\n"
        ".text\n");

int pick(int);
int short_entry(int);

int main(void) {
    int sum = 0;
    for (int i = 0; i < 5; i++) {
        sum += pick(i % 4);
        sum += short_entry(i % 3);
    }
    printf("pick(0..3) = %d %d %d %d\n", pick(0), pick(1), pick(2), pick(3));
    printf("short_entry(0, 5) = %d %d\n", short_entry(0), short_entry(5));
    printf("sum = %d\n", sum);
    return 0;
}
