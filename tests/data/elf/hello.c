#include <stdio.h>
#include <math.h>
int main(int c, char **v){printf("%f\n", sqrt(c)); return 0;}
