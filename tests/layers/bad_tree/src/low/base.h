#pragma once

#include "high/widget.h"  // upward: low/ may include nothing above it
