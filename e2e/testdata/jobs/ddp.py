"""A user's first PyTorch DistributedDataParallel job, on CPU over gloo (ddp.sbatch starts it).

Each rank trains the same small model one step on its own data; DDP all-reduces the gradients,
so every rank ends with the same weights. Each rank also all-reduces rank+1 and prints the sum.
"""
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = nn.functional.mse_loss(model(torch.full((8, 4), float(rank + 1))), torch.zeros(8, 1))
loss.backward()
opt.step()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
weights = model.module.weight.detach().sum().item()
print(f"rank {rank} of {world} on {socket.gethostname()}: allreduce {total.item():.0f} weights {weights:.6f}", flush=True)
dist.destroy_process_group()
