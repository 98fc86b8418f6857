#pragma once
// The backends compiled into the executable (the CPU backend); the GPU backends arrive as
// plugins. The registry adds these before it loads any plugin, and the self-check's child
// process, which loads one plugin alone, adds them too.
namespace ps {

class Registry;

void register_builtin_backends(Registry& registry);

}  // namespace ps
