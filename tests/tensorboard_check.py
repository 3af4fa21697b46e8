"""Loads a log directory written by tests/test_summary.cpp with TensorBoard's
own EventAccumulator and checks what TensorBoard would show.

usage: tensorboard_check.py LOGDIR GRAPH_NODE_COUNT
Prints "tensorboard check: ok" and exits 0, or prints each mismatch and exits 1.
"""
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util


def main():
    logdir, node_count = sys.argv[1], int(sys.argv[2])
    acc = event_accumulator.EventAccumulator(
        logdir, size_guidance={"scalars": 0, "histograms": 0, "images": 0, "tensors": 0})
    acc.Reload()
    problems = []

    def expect(what, got, want):
        if got != want:
            problems.append(f"{what}: got {got!r}, want {want!r}")

    tags = acc.Tags()
    expect("scalar tags", sorted(tags["scalars"]), ["loss"])
    loss = acc.Scalars("loss")
    expect("loss steps", [e.step for e in loss], [1, 2, 3])
    expect("loss values", [e.value for e in loss], [0.5, 0.25, 0.125])

    expect("histogram tags", sorted(tags["histograms"]), ["weights"])
    histo = acc.Histograms("weights")[0].histogram_value
    expect("histogram count", histo.num, 4.0)
    expect("histogram min", histo.min, -1.0)
    expect("histogram max", histo.max, 3.0)
    expect("histogram bucket total", sum(histo.bucket), 4.0)

    expect("image tags", sorted(tags["images"]), ["picture/image"])
    image = acc.Images("picture/image")[0]
    expect("image size", (image.height, image.width), (2, 3))
    expect("image is a PNG", image.encoded_image_string[:4], b"\x89PNG")

    expect("tensor tags", sorted(tags["tensors"]), ["note"])
    text = tensor_util.make_ndarray(acc.Tensors("note")[0].tensor_proto)
    expect("text", text.item(), b"hello tensorboard")
    expect("text plugin", acc.SummaryMetadata("note").plugin_data.plugin_name, "text")

    expect("graph node count", len(acc.Graph().node), node_count)

    for p in problems:
        print("tensorboard check:", p)
    if problems:
        return 1
    print("tensorboard check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
