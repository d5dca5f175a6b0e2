/* loops_cold.c: a loop that runs through a function's cold part, shaped as python3's
 * sub_55f7b0 and its cold part (issue 16). `coldsum` sums an array; a negative value goes to
 * the cold part, which adds its magnitude plus 1000 and jumps back into the loop's middle.
 * `coldsum`'s first block falls into the loop's header.
 *
 * Stripped, `coldsum` is found by `.eh_frame` alone (it is reached only through a pointer
 * made with `lea`), and the cold part is named `sub_….cold` after it. The cold part's own CFG
 * then runs through `coldsum`'s loop, back to the cold part's start: its first block is a loop
 * header, so a point on that loop's entry copies the cold part's code whole — which holds
 * `coldsum`'s loop header, but not `coldsum`'s first block, which falls into it in the
 * original code. A copy that takes the header for dead code left `coldsum`'s iteration
 * points unrun until a negative value led into the copy.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

__asm__(".text\n"
        ".p2align 4\n"
        ".globl coldsum\n"
        ".type coldsum, @function\n"
        "coldsum:\n"
        "  .cfi_startproc\n"
        "  pushq %rbx\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbx, -16\n"
        "  xorl %eax, %eax\n"
        "  xorl %ecx, %ecx\n"
        "  movq %rsi, %rbx\n"
        /* The header: the first block falls into it. */
        "coldsum_head:\n"
        "  cmpq %rbx, %rcx\n"
        "  jge coldsum_done\n"
        "  movl (%rdi,%rcx,4), %edx\n"
        "  testl %edx, %edx\n"
        "  js coldsum.cold\n"
        "  addl %edx, %eax\n"
        "coldsum_next:\n"
        "  addq $1, %rcx\n"
        "  jmp coldsum_head\n"
        "coldsum_done:\n"
        "  popq %rbx\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size coldsum, .-coldsum\n"
        ".p2align 4\n"
        ".type coldsum.cold, @function\n"
        "coldsum.cold:\n"
        "  .cfi_startproc\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbx, -16\n"
        "  negl %edx\n"
        "  addl $1000, %edx\n"
        "  addl %edx, %eax\n"
        "  jmp coldsum_next\n"
        "  .cfi_endproc\n"
        ".size coldsum.cold, .-coldsum.cold\n");

/* `callmerge(x)`: `x + 1`, or for odd `x`, `twice(x) + 1`. The call's return falls into the
 * block the `je` also reaches: the edge after the call is told apart from the branch's only
 * in a copy of the whole function, where the callee returns into the original code and its
 * jump into the copy runs the edge's snippets. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl callmerge\n"
        ".type callmerge, @function\n"
        "callmerge:\n"
        "  .cfi_startproc\n"
        "  subq $8, %rsp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  movl %edi, %eax\n"
        "  testb $1, %dil\n"
        "  je callmerge_join\n"
        "  call twice\n"
        "callmerge_join:\n"
        "  addl $1, %eax\n"
        "  addq $8, %rsp\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size callmerge, .-callmerge\n"
        ".p2align 4\n"
        ".globl twice\n"
        ".type twice, @function\n"
        "twice:\n"
        "  leal (%rdi,%rdi), %eax\n"
        "  ret\n"
        ".size twice, .-twice\n");

long coldsum(const int *v, long n);
int callmerge(int x);

int main(void) {
    static const int a[] = {1, 2, -3, 4, 5};
    static const int b[] = {7, 8, 9};
    static const int c[] = {-1, -2};
    /* Through a pointer, so that no direct call names `coldsum` a function. */
    long (*volatile sum)(const int *, long) = coldsum;
    printf("a=%ld\n", sum(a, 5));
    printf("b=%ld\n", sum(b, 3));
    printf("c=%ld\n", sum(c, 2));
    printf("a again=%ld\n", sum(a, 5));
    int merged = 0;
    for (int x = 0; x < 8; x++)
        merged += callmerge(x);
    printf("merged=%d\n", merged);
    return 0;
}
