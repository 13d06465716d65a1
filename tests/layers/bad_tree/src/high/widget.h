#pragma once

#include "low/base.h"
#include "high/gadget.h"
