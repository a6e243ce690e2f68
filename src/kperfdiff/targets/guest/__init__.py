"""What a QEMU guest is made of: Debian kernel packages, the initramfs and its pieces, ELF facts
of a kernel image, the framed console transfer and the instruction-counting plugin."""
