/*
** emu_preludes.h
** The preludes the families' kernels take on the emulator (each family's
** `preludes.emu`), for the tests that compile kernels of their own.
*/
#ifndef EMU_PRELUDES_H
#define EMU_PRELUDES_H

#include "gen.h"

static const gen_preludes emu_preludes = {
    4, {"prelude_emu.h", "prelude_emu_tc.h", "prelude_emu_sm90.h", "prelude_tile.h"}};

#endif
