#pragma once
// How a group's table is made from its op list: LOCKSTEP_<GROUP>_OPS(X) calls X(name, function type)
// once per op, in table order. The table's members and, for a backend that defines every op under
// the op's own name, its whole table come from that one list.
#include <type_traits>

/// A table's member: a pointer to a function of the op's type, null until a backend sets it.
#define LOCKSTEP_KERNEL_MEMBER(name, ...) std::add_pointer_t<__VA_ARGS__> name = nullptr;
/// A backend's table entry for the op it defines under the op's name (in its own namespace).
#define LOCKSTEP_KERNEL_ENTRY(name, ...) .name = &name,
