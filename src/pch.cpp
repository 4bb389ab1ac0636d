// The translation unit that compiles the precompiled header (src/pch.h) once for every layer.
