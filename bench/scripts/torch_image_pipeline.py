"""torchvision's ImageNet training input, as bench/image_pipeline.cpp measures lockstep's: ImageFolder(root/train)
with RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet's mean and std), batched by
a DataLoader (bench/image_pipeline.bench.sh runs both). One warm-up pass over the folder, then --epochs timed ones.

    python torch_image_pipeline.py --root DIR [--workers 1] [--batch 64] [--epochs 3] [--threads 1]

--workers 0 loads in the main process (DataLoader's num_workers=0); W > 0 starts W worker processes, kept
between epochs (persistent_workers), each of which sets torch's threads to 1 as DataLoader workers do.
--threads sets the main process's (torch.set_num_threads); 0 leaves torch's default."""
import argparse
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--image-size", type=int, default=224)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    transform = transforms.Compose([
        transforms.RandomResizedCrop(args.image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    dataset = datasets.ImageFolder(f"{args.root}/train", transform)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0)

    def epoch():
        images = 0
        for x, y in loader:
            images += x.shape[0]
        return images

    epoch()  # warm-up: file pages, worker start, allocator
    t0 = time.perf_counter()
    images = sum(epoch() for _ in range(args.epochs))
    sec = time.perf_counter() - t0
    print(f"impl=torchvision torch={torch.__version__} torchvision={__import__('torchvision').__version__} "
          f"pillow={__import__('PIL').__version__} workers={args.workers} threads={torch.get_num_threads()} "
          f"images={images} seconds={sec:.3f} images_per_second={images / sec:.1f}")


if __name__ == "__main__":
    main()
