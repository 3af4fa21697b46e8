"""The LSTM language model of apps/lib/lstm_lm.hpp in PyTorch on a GPU, for
actorflow-bench --only gpu: embedding 256 -> one LSTM layer of 256 (cuDNN's)
-> softmax over 10001 words, truncated BPTT over 35 steps of 32 streams with
the state carried across segments, Adam (lr 1e-3), gradients clipped to a
global norm of 5. The sampled softmax draws 512 distinct candidates from the
log-uniform law (as TensorFlow's log_uniform_candidate_sampler), subtracts
the log of their expected counts and masks accidental hits; the full softmax
is a linear layer and cross-entropy. Text: 10001-word Zipfian random ids, as
actorflow's GPU row uses.

usage: torch_gpu_lm.py sampled|full STEPS
prints: words_per_s=<training words per second over STEPS steps after 5 warm-up ones>
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EMBED, HIDDEN, STEPS, STREAMS, SAMPLED = 10001, 256, 256, 35, 32, 512


class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN)
        self.softmax_w = nn.Parameter(torch.randn(VOCAB, HIDDEN) * 0.05)
        self.softmax_b = nn.Parameter(torch.zeros(VOCAB))

    def forward(self, words, state):
        out, state = self.lstm(self.embedding(words), state)
        return out.reshape(-1, HIDDEN), state


def log_uniform_probs(device):
    classes = torch.arange(VOCAB, device=device, dtype=torch.float64)
    return ((torch.log(classes + 2) - torch.log(classes + 1)) / math.log(VOCAB + 1)).float()


def sampled_loss(model, hidden, targets, probs):
    sampled = torch.multinomial(probs, SAMPLED, replacement=False)
    # Expected counts of a class among the draws that gave SAMPLED distinct ones.
    tries = SAMPLED  # a lower bound of the draws; enough for the bias correction's scale
    log_q_true = torch.log(-torch.expm1(tries * torch.log1p(-probs[targets])))
    log_q_sampled = torch.log(-torch.expm1(tries * torch.log1p(-probs[sampled])))
    w, b = model.softmax_w, model.softmax_b
    true_logits = (hidden * w[targets]).sum(1) + b[targets] - log_q_true
    sampled_logits = hidden @ w[sampled].t() + b[sampled] - log_q_sampled
    sampled_logits = sampled_logits.masked_fill(targets[:, None] == sampled[None, :], -1e9)
    logits = torch.cat([true_logits[:, None], sampled_logits], 1)
    return F.cross_entropy(logits, torch.zeros_like(targets))


def main():
    kind, steps = sys.argv[1], int(sys.argv[2])
    if not torch.cuda.is_available():
        print("no CUDA device")
        sys.exit(1)
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = LanguageModel().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    probs = log_uniform_probs(device)
    gen = torch.Generator().manual_seed(17)
    u = torch.rand(STREAMS * STEPS * (steps + 6) + 1, generator=gen, dtype=torch.float64)
    text = (torch.exp(u * math.log(VOCAB + 1)).long() - 1).clamp(0, VOCAB - 1)
    per_stream = (text.numel() - 1) // STREAMS
    inputs = text[: STREAMS * per_stream].view(STREAMS, per_stream).t()  # [time, streams]
    targets = text[1 : STREAMS * per_stream + 1].view(STREAMS, per_stream).t()
    state = None

    def step(i):
        nonlocal state
        x = inputs[i * STEPS : (i + 1) * STEPS].to(device)  # from host memory, as a feed
        y = targets[i * STEPS : (i + 1) * STEPS].reshape(-1).to(device)
        if state is not None:
            state = tuple(s.detach() for s in state)
        hidden, state = model(x, state)
        if kind == "full":
            loss = F.cross_entropy(hidden @ model.softmax_w.t() + model.softmax_b, y)
        else:
            loss = sampled_loss(model, hidden, y, probs)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss.item()

    for i in range(5):
        step(i)
    start = time.perf_counter()
    for i in range(5, 5 + steps):
        loss = step(i)
    seconds = time.perf_counter() - start
    print(f"torch {torch.__version__} {torch.cuda.get_device_name()} {kind} softmax "
          f"words_per_s={steps * STEPS * STREAMS / seconds:.1f} final_loss={loss:.4f}")


if __name__ == "__main__":
    main()
