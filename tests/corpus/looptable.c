/* A function whose first block is a loop header and which dispatches through a jump table
   inside the loop (cc1's 0x7f12a0): its entry from the caller is told apart from the back
   edges only in a copy of the whole function, whose table must lead into the copy. A PIE's
   table holds offsets from its start, a non-PIE's addresses, as gcc emits them. The analysis
   tests count its entries and exits, saved and live. */
#include <stdio.h>

int spin_table(int);
__asm__(
    ".text\n"
    ".globl spin_table\n.type spin_table,@function\n"
    "spin_table:\n"
    "  .cfi_startproc\n"
    "  cmp $3, %edi\n"
    "  ja .Lst_big\n"
    "  mov %edi, %edi\n"
#ifdef __PIE__
    "  lea .Ltab_st(%rip), %rdx\n"
    "  movslq (%rdx,%rdi,4), %rax\n"
    "  add %rdx, %rax\n"
    "  jmp *%rax\n"
#else
    "  jmp *.Ltab_st(,%rdi,8)\n"
#endif
    ".Lst0: mov $100, %eax\n  ret\n"
    ".Lst1: sub $1, %edi\n  jmp spin_table\n"
    ".Lst2: sub $2, %edi\n  jmp spin_table\n"
    ".Lst3: xor $1, %edi\n  jmp spin_table\n"
    ".Lst_big: lea 7(%rdi), %eax\n  ret\n"
    "  .cfi_endproc\n"
    ".size spin_table, .-spin_table\n"
    ".section .rodata\n"
    ".p2align 3\n"
    ".Ltab_st:\n"
#ifdef __PIE__
    "  .long .Lst0-.Ltab_st, .Lst1-.Ltab_st, .Lst2-.Ltab_st, .Lst3-.Ltab_st\n"
#else
    "  .quad .Lst0, .Lst1, .Lst2, .Lst3\n"
#endif
    ".text\n");

int main(void) {
    long sum = 0;
    for (int i = -3; i < 12; i++)
        sum += spin_table(i);
    printf("%ld\n", sum);
    return 0;
}
