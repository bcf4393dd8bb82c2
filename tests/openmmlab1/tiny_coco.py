"""A tiny COCO-format detection dataset for the OpenMMLab 1.x (mmdet 2.x) tests.

``make_tiny_coco(root)`` writes ``root/images/000000.png ...`` (64x64 RGB PNG, written with
the standard library only) and ``root/annotations/train.json`` with two categories:
``car`` (COCO category id 1, mmdet label 0) and ``pedestrian`` (category id 2, label 1).

Every image holds one ``car`` box. Image ``i`` (0-based, in the order of the json's
``images`` list, which is the order ``CocoDataset`` keeps) also holds a ``pedestrian``
box exactly when ``i`` is even: ``has_pedestrian(i)``. The pixels and box positions are
drawn from ``random.Random(seed)``, so the same arguments write the same bytes.
"""
import json
import os
import os.path as osp
import random
import struct
import zlib

SIZE = 64
CLASSES = ('car', 'pedestrian')
PEDESTRIAN_LABEL = 1  # mmdet label (0-based, the order of CLASSES) of category id 2


def has_pedestrian(index):
    """Whether image ``index`` (dataset order) holds a box of label 1 (``pedestrian``)."""
    return index % 2 == 0


def _png(path, pixels, width, height):
    """Write an 8-bit RGB PNG; ``pixels`` is a bytearray of height*width*3 bytes."""
    raw = b''.join(b'\x00' + bytes(pixels[y * width * 3:(y + 1) * width * 3])
                   for y in range(height))

    def chunk(tag, data):
        return (struct.pack('>I', len(data)) + tag + data
                + struct.pack('>I', zlib.crc32(tag + data) & 0xffffffff))

    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n')
        f.write(chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b'IDAT', zlib.compress(raw, 6)))
        f.write(chunk(b'IEND', b''))


def _box(rng, min_side, max_side):
    w = rng.randint(min_side, max_side)
    h = rng.randint(min_side, max_side)
    x = rng.randint(0, SIZE - w)
    y = rng.randint(0, SIZE - h)
    return [x, y, w, h]


def make_tiny_coco(root, num_images=8, seed=0):
    """Write the dataset under ``root`` (created if missing) and return ``root``."""
    rng = random.Random(seed)
    os.makedirs(osp.join(root, 'images'), exist_ok=True)
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    images, annotations = [], []
    for i in range(num_images):
        name = '%06d.png' % i
        pixels = bytearray(rng.randrange(40, 90) for _ in range(SIZE * SIZE * 3))
        boxes = [(1, _box(rng, 16, 32), (200, 40, 40))]
        if has_pedestrian(i):
            boxes.append((2, _box(rng, 10, 24), (40, 200, 40)))
        for category_id, (x, y, w, h), color in boxes:
            for yy in range(y, y + h):
                for xx in range(x, x + w):
                    pixels[(yy * SIZE + xx) * 3:(yy * SIZE + xx) * 3 + 3] = bytes(color)
            annotations.append(dict(id=len(annotations) + 1, image_id=i + 1,
                                    category_id=category_id, bbox=[x, y, w, h],
                                    area=w * h, iscrowd=0))
        _png(osp.join(root, 'images', name), pixels, SIZE, SIZE)
        images.append(dict(id=i + 1, file_name=name, width=SIZE, height=SIZE))
    categories = [dict(id=k + 1, name=n, supercategory='object') for k, n in enumerate(CLASSES)]
    with open(osp.join(root, 'annotations', 'train.json'), 'w') as f:
        json.dump(dict(images=images, annotations=annotations, categories=categories), f)
    return root


if __name__ == '__main__':
    import sys
    print(make_tiny_coco(sys.argv[1] if len(sys.argv) > 1 else 'data/tiny_coco'))
