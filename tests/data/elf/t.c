int small(int x){return x+1;}
int big(int *p,int n){int s=0;for(int i=0;i<n;i++)s+=p[i]*p[i]^i;return s;}
__attribute__((section(".init.text"))) int boot_only(int x){return x*3;}
static int helper(int x){return x*7;}
int uses(int x){return helper(x)+small(x);}
