"""Torch models (``rltrainer.models.torch.torch_modelv2.TorchModelV2``, as RLlib's path)."""
