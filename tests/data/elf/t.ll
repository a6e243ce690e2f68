define i32 @small(i32 %x) {
  %r = add i32 %x, 1
  ret i32 %r
}
define i32 @big(i32 %x, i32 %y) {
  %a = mul i32 %x, %y
  %b = xor i32 %a, %x
  %c = add i32 %b, 12345
  ret i32 %c
}
define i32 @boot_only(i32 %x) section ".init.text" {
  %r = mul i32 %x, 3
  ret i32 %r
}
