#pragma once

#include "high/widget.h"  // widget.h includes gadget.h: a cycle
