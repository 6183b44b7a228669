/*
** prelude_cuda_tc.cuh
** Tensor-core primitives of the cuda backend (to be written).
*/
