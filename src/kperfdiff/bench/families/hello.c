/*
 * hello: the small program proc.exec and proc.shell start (lmbench's
 * hello). It does nothing and exits 0. Built static as kpd-hello so that
 * exec cost does not include the dynamic loader.
 */
int main(void)
{
	return 0;
}
