"""PyTorch on a GPU, the reference of actorflow-bench's gpu rows: the Fashion-MNIST MLP or CNN
(the layers of apps/lib/fmnist_models.cpp), Adam 1e-3, one fixed random batch in host memory,
as actorflow-bench's step feeds it.

usage: python3 torch_gpu_fmnist.py {mlp|cnn} STEPS BATCH
Each step copies the batch to the GPU, runs forward, backward and Adam, and reads the loss back
to the host (actorflow's session.run returns it each step). cuDNN picks its algorithms
(torch.backends.cudnn.benchmark), as PyTorch users set it for fixed shapes. Warm-up steps are
not timed. Prints one line with step_ms.
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def model_for(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                             nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Linear(1024, 10))


def main():
    kind, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if not torch.cuda.is_available():
        print("no CUDA device")
        sys.exit(1)
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = model_for(kind).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    images = torch.rand(batch, 1, 28, 28)  # host memory, as actorflow's feed
    labels = torch.randint(0, 10, (batch,))

    def step():
        x, y = images.to(device), labels.to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(20):  # warm-up: cuDNN's search, the caching allocator
        step()
    times = []
    block = max(1, steps // 5)
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(block):
            loss = step()
        times.append((time.perf_counter() - start) / block)
    times.sort()
    print(f"torch {torch.__version__} {torch.cuda.get_device_name()} {kind} batch={batch} "
          f"step_ms={1000 * times[2]:.4f} final_loss={loss:.4f}")


if __name__ == "__main__":
    main()
