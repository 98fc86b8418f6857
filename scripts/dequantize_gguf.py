#!/usr/bin/env python3
"""Writes a GGUF file's weights as F32 (each quantized tensor dequantized exactly), metadata
unchanged: a reference without rounding in the matrix products, to tell how far each engine's
quantized arithmetic moves the logits. Needs the `gguf` package (pip install gguf).

    python3 scripts/dequantize_gguf.py model.Q4_1.gguf model.f32.gguf
"""
import sys

import gguf
import numpy as np


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    r = gguf.GGUFReader(sys.argv[1])
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(sys.argv[2], arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = f.types[-1]
            val = ([bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
                   if et == gguf.GGUFValueType.STRING else [f.parts[i].tolist()[0] for i in f.data])
            w.add_key_value(name, val, vt, sub_type=et)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_key_value(name, bytes(f.parts[-1]).decode("utf-8", "surrogateescape"), vt)
        else:
            w.add_key_value(name, f.parts[-1].tolist()[0], vt)
    for t in r.tensors:
        d = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, d.reshape(list(reversed([int(x) for x in t.shape]))),
                     raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
