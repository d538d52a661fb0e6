/* main.c: the executable's entry point, kept apart so tests link the library without it. */
#include "pacirt.h"

int main(int argc, char **argv) { return pr_main(argc, argv, &pr_generated_program); }
