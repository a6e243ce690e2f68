#include <math.h>
double lib_fn(double x){return sqrt(x)+1;}
