"""A small vision-language ``PreTrainedModel`` trained by the Hugging Face Trainer on each rank:
its vision tower runs only on the samples that carry an image, so on a text-only batch its
parameters get no gradient, on some ranks only (TRL #6617's shape). Under ``with
guard_ddp_builds(): trainer.train()``, and under the Trainer's own
``ddp_find_unused_parameters=True``, with and without gradient checkpointing, side by side in
one process group.
"""
import os
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCABULARY, WIDTH, IMAGE_FEATURES, TOKENS = 32, 16, 12, 6


def _sample(index: int) -> Dict:
    """Sample ``index``, as this rank's data has it: rank 1's even samples carry an image,
    rank 0's none (its vision tower is unused in every step, rank 1's in some)."""
    generator = torch.Generator().manual_seed(index)
    ids = torch.randint(VOCABULARY, (TOKENS, ), generator=generator)
    sample = dict(input_ids=ids, labels=ids.roll(-1))
    if torch.distributed.get_rank() == 1 and index % 2 == 0:
        sample['pixel_values'] = torch.randn(IMAGE_FEATURES, generator=generator)
    return sample


def _model_classes():
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.modeling_layers import GradientCheckpointingLayer
    from transformers.modeling_outputs import CausalLMOutput

    class TinyVisionLanguageConfig(PretrainedConfig):
        model_type = 'tiny-vision-language'

    class Block(GradientCheckpointingLayer):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(WIDTH, WIDTH)

        def forward(self, hidden):
            return hidden + torch.tanh(self.linear(hidden))

    class TinyVisionLanguageModel(PreTrainedModel):
        config_class = TinyVisionLanguageConfig
        supports_gradient_checkpointing = True

        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(VOCABULARY, WIDTH)
            self.vision_tower = nn.Sequential(nn.Linear(IMAGE_FEATURES, WIDTH), nn.GELU(),
                                              nn.Linear(WIDTH, WIDTH))
            self.blocks = nn.ModuleList(Block() for _ in range(2))
            self.lm_head = nn.Linear(WIDTH, VOCABULARY)
            self.post_init()

        def forward(self, input_ids, labels=None, pixel_values=None):
            hidden = self.embed(input_ids)
            if pixel_values is not None:  # a text-only batch skips the vision tower
                hidden = hidden + self.vision_tower(pixel_values).unsqueeze(1)
            for block in self.blocks:
                hidden = block(hidden)
            logits = self.lm_head(hidden)
            loss = F.cross_entropy(logits.reshape(-1, VOCABULARY), labels.reshape(-1))
            return CausalLMOutput(loss=loss, logits=logits)

    return TinyVisionLanguageConfig, TinyVisionLanguageModel


class _Samples(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, index):
        return _sample(index)


def _collate(samples: List[Dict]) -> Dict:
    """A batch of samples alike: text-only, or all with an image (a batch mixing both drops
    the images, as a text-only batch)."""
    batch = {key: torch.stack([s[key] for s in samples]) for key in ('input_ids', 'labels')}
    if all('pixel_values' in s for s in samples):
        batch['pixel_values'] = torch.stack([s['pixel_values'] for s in samples])
    return batch


def train(rank: int, guarded: bool, checkpointing: bool, root: str, steps: int = 8) -> Dict:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from mmdet3d_ddp_guard.pytorch import guard_ddp_builds
    config_class, model_class = _model_classes()
    torch.manual_seed(0)
    model = model_class(config_class())
    none_grads = []

    class Recorder(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            none_grads.append(sorted(name for name, p in model.named_parameters()
                                     if p.grad is None))

    arguments = TrainingArguments(
        output_dir=os.path.join(root, f'{guarded}-{checkpointing}'), use_cpu=True,
        ddp_backend='gloo', per_device_train_batch_size=1, max_steps=steps,
        learning_rate=1e-2, report_to=[], save_strategy='no', logging_strategy='no',
        disable_tqdm=True, seed=0, dataloader_num_workers=0,
        gradient_checkpointing=checkpointing,
        # The reference: the Trainer's own graph search, also under checkpointing.
        ddp_find_unused_parameters=None if guarded else True)
    trainer = Trainer(model=model, args=arguments, train_dataset=_Samples(),
                      data_collator=_collate, callbacks=[Recorder()])
    if guarded:
        with guard_ddp_builds():
            trainer.train()
    else:
        trainer.train()
    wrapper = trainer.model_wrapped
    usage_record = getattr(wrapper, 'usage_record', None)
    optimizer_state = trainer.optimizer.state_dict()['state']
    return dict(params={k: v.detach().clone() for k, v in model.named_parameters()},
                optimizer_state={k: {n: (t.clone() if torch.is_tensor(t) else t)
                                     for n, t in v.items()} for k, v in optimizer_state.items()},
                none_grads=none_grads, wrapper=type(wrapper).__name__,
                ranks_differed=usage_record and usage_record.statistics.iterations_ranks_differ,
                ddp_class=torch.nn.parallel.DistributedDataParallel.__name__)


def side_by_side(rank: int, world_size: int, checkpointing: List[bool], root: str) -> List[Dict]:
    return [dict(guarded=train(rank, True, cp, root), reference=train(rank, False, cp, root))
            for cp in checkpointing]
