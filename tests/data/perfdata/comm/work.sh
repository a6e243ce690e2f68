seq 1 3000000 > /dev/null
(i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done)
perl -e '$0 = "renamed"; my $x = 0; $x += $_ for 1 .. 3000000;'
dd if=/dev/zero of=/dev/null bs=4k count=60000 2>/dev/null
