"""The architecture refactor changed no byte: the demo and a set of composed configs built with
the code after it have the sha256 that the code before it produced (pinned below; manifests are
compared with the tool's version fields removed). A later change that alters outputs on purpose
updates these pins in the same commit and says why."""

from pinned_builds import build_everything

PINNED = {
    "demo/datasets/hard-spurious-imagenet/_info.json": "54ab2eb81673dd0a74ab20443925a6932c4c08946f144d9d41ed6813d01e08b8",
    "demo/datasets/hard-spurious-imagenet/val-00000.tar": "71c78ae7176bcd37a491410925e4fb723871c3d646b4aad5e2fe106cd3cfa46d",
    "demo/hard-spurious-imagenet/data/hard-spurious-imagenet/_info.json": "54ab2eb81673dd0a74ab20443925a6932c4c08946f144d9d41ed6813d01e08b8",
    "demo/hard-spurious-imagenet/data/hard-spurious-imagenet/val-00000.tar": "71c78ae7176bcd37a491410925e4fb723871c3d646b4aad5e2fe106cd3cfa46d",
    "demo/parts/_info.json": "a4652dc870b62442a7bb1f7e08504ff28922fe99f34b52450f7ef79da85d589b",
    "demo/parts/val-00000.tar": "b017cc31493f44e27cae98ce734aaacdc4430065e07880129a499edd2a182b64",
    "demo/parts/val-00001.tar": "f91fcf0d1da0540d3750e401ab1a32995e4a6105c67cee78a01d7606aa02cac8",
    "fake/datasets/custom/_info.json": "ff87895ebfe9fba888109786000fb2eba7c4afb96b60ab986d19fdf7b95b9be0",
    "fake/datasets/custom/val-00000.tar": "2cc908f669e694e50f695da0ec2eb828146b208b7e490c61afaeec0bf9e35d7f",
    "fake/datasets/hard-spurious-imagenet-ar/_info.json": "37e4266f88626cc8d3e40e6bd1e9aea48c7551c69f58d629409308c25f58b91a",
    "fake/datasets/hard-spurious-imagenet-ar/val-00000.tar": "794bc4bf00e2ec0ed24692c39a60393fad55478cb366cddf33c2cfbc5a31f103",
    "fake/datasets/hard-spurious-imagenet/_info.json": "2892822006c0ff2232de7e4beab99aec28bf1c169b6da2fe5e4b102706649b6c",
    "fake/datasets/hard-spurious-imagenet/val-00000.tar": "11a99bc4ea316c8cb1a0027a14699d0e05d1cda38eb7d44963c4296e40e2b5cf",
    "fake/datasets/hard-spurious-imagenet/val-00001.tar": "dbf8aa9491ce1a253ca972a1e43a5a0d2d70a3f5f3ea94ee75cdd03540eb8a2a",
    "fake/datasets/hard-spurious-imagenet/val-00002.tar": "0698cb8d59f3ca08f56bc1d8edfd6096c675cf870fcd4b01bbec6136fbb0b67c",
    "fake/datasets/hard-spurious-imagenet/val-00003.tar": "487f6e37af9cb0c74d9849b2875a2125d9d9b764de0a1b9f5d94dc2cb5c6191f",
    "fake/datasets/hard-spurious-imagenet/val-00004.tar": "34694c9c57d33cba6305234e0f4061c7377d3fbb56221c1b69dd6ee91bb5513b",
    "fake/datasets/hard-spurious-imagenet/val-00005.tar": "e2a6c34ee67057d2f07636d183db2a3b4f357f24f22c237c63106de290cfaf94",
    "fake/datasets/hard-spurious-imagenet/val-00006.tar": "d7cb55b4e9b401b4c8fbe697fcac48ac6c9cd8776ea969154054d73555c68092",
    "fake/parts/_info.json": "07d4da3553a6d3b9e946845f1310610df54e311c2435b88ec0415ddd4fc18bbb",
    "fake/parts/val-00000.tar": "1edfe20ca0b23db7fdde795fa512fe3f04c0960d4dc146cab801b0e22b4dadb9",
    "fake/parts/val-00001.tar": "a2bad620de9c03835580a5a3c7a467addba711b49a003108558233632bffc624",
    "fake/parts/val-00002.tar": "9313f625cfe3200aba22f4d19a64e8f4c3c60d4d167b8492e38f40315412dd65",
    "fake/parts/val-00003.tar": "81304ed661672d2f924946830ca312f916ec8a3e74e631371952c6dee203b7c7",
    "fake/parts/val-00004.tar": "3a320e0fd1361f2195a94101d9abd46ef769f8af521814cc9e85fd0eb65674fa",
    "ten/datasets/hard-spurious-imagenet-10/_info.json": "3ce8340ab8a81b7a9f35e53e2390844eea2b0c8d3fb8d0d4555e971d14a061ad",
    "ten/datasets/hard-spurious-imagenet-10/test-00000.tar": "4333c3b31e1a3cf37618b7cb71042d053f8a8d8d06b3e493187713c0711a23f4",
    "ten/datasets/hard-spurious-imagenet-10/train-00000.tar": "63adc136820938aa895c1d9c4bc8819b514c05f47ea7edb2c5353d6986d153ac",
    # the parts test factory now writes its manifest through the typed Manifest, which adds the
    # schema_version that extract always wrote; the factory was the one that drifted
    "ten/parts/_info.json": "7b1589b2bb8e487a4d470d3ad80f4019ea7dc354d5dd3a43e5d02df9ea8fde7b",
    "ten/parts/val-00000.tar": "885e22b08c3e278925ff4547e54a44d00517f33800c892f50c629825ef7a0976",
    "ten/parts/val-00001.tar": "62e985a71df50d0f7b76c3d9a822af672f4f1195d79c738f6cd4bfe37b1a1fa7",
    "ten/parts/val-00002.tar": "6bb70b7c7b216f4d81a63a1991354e9091dcffbd1c9b7f82a7b7797f81f2a42a",
    "ten/parts/val-00003.tar": "83697e64489fb288e8560674460b1f6b4b09568e6d19cbb40755da3826c2e11e",
}


def test_outputs_are_byte_identical_to_the_pinned_build(tmp_path):
    digests = build_everything(tmp_path)
    changed = sorted(path for path in PINNED if digests.get(path) != PINNED[path])
    new = sorted(set(digests) - set(PINNED))
    assert not changed and not new, f"changed: {changed}; not pinned: {new}"
