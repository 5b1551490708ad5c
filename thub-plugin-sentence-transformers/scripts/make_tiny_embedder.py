"""Build a tiny sentence-transformers embedding model locally (no hub download).

A 2-layer BERT (hidden size 32) with a WordPiece tokenizer trained here on a small word list,
wrapped as a ``SentenceTransformer`` with mean pooling, saved to ``--out``. Random weights: tests
train it for a few steps on CPU.

    python thub-plugin-sentence-transformers/scripts/make_tiny_embedder.py --out /tmp/tiny-embedder
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

# words of the tests' labelled sets (tests/conftest.py) and a few more, so few texts are [UNK]
CORPUS = (
    "what is the capital of france paris germany berlin italy rome spain madrid city country where "
    "design a microservices architecture database api service queue cache scale deploy server cluster "
    "write a poem about the sea moon love night song story rhyme verse sky star dream heart "
    "how do i reset my password account login email billing invoice refund payment charge card "
    "please can you tell me help question answer a an the is of to for on in and or with my your "
    "one two three four five six seven eight nine ten zero number"
)


def build(out: Path, hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """Write the tiny model to ``out`` and return it."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    torch.manual_seed(seed)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator([CORPUS] * 4, trainers.WordPieceTrainer(vocab_size=400, special_tokens=special))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = BertTokenizerFast(tokenizer_object=tokenizer, model_max_length=64)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=2, intermediate_size=hidden * 2, max_position_embeddings=64)
    with tempfile.TemporaryDirectory() as work:
        BertModel(config).save_pretrained(work)
        fast.save_pretrained(work)
        encoder = Transformer(work, max_seq_length=64)
        model = SentenceTransformer(modules=[encoder, Pooling(encoder.get_embedding_dimension(), "mean")],
                                    device="cpu")
        model.save(str(out))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    print(build(parser.parse_args().out))


if __name__ == "__main__":
    main()
