/*
** prelude_emu_tc.h
** Tensor-core primitives of the CPU emulator (to be written).
*/
