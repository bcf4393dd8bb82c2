from setuptools import find_packages, setup

PACKAGE = 'mmdet3d_ddp_guard'


def read_version():
    namespace = {}
    with open(f'{PACKAGE}/version.py') as f:
        exec(f.read(), namespace)
    return namespace['__version__']


setup(
    name=PACKAGE,
    version=read_version(),
    description='Multi-GPU training of MMDetection3D models that never dies of '
    'unused parameters: a guarded DDP wrapper and an unused-parameter hook.',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    # The package alone: the demo's and the tests' models and data writers stay in the
    # repository, and nothing else is written into site-packages.
    packages=find_packages(include=(PACKAGE, f'{PACKAGE}.*')),
    python_requires='>=3.8',
    # Nothing here, as in OpenMMLab's own packages: the user installs the torch that fits
    # their CUDA, and pip must never replace it; and the framework is the user's too, MMEngine
    # (mmdet3d >= 1.1) or mmcv-full 1.x (mmdet 2.x, mmdet3d 0.x / 1.0.0rc), which must not get
    # the other one installed beside it. The supported ranges (torch >= 1.9, newest tested
    # 2.14; mmengine >= 0.8 as mmdet3d 1.4 requires; mmcv-full >= 1.4) are checked at import,
    # in mmdet3d_ddp_guard/environment/versions.py. No upper caps, so that pip never downgrades.
    install_requires=[],
    extras_require={
        'mmengine': ['mmengine>=0.8'],
        # The real 3D stack, for the demo, the check command on mmdet3d configs and the
        # end-to-end tests. mmcv must be built with its C++ ops: see tools/make_venv.sh. The
        # caps are mmdet3d 1.4's own: it refuses mmcv >= 2.2 and mmdet >= 3.4 at import.
        'mmdet3d': ['mmcv>=2.0.0rc4,<2.2.0', 'mmdet>=3.0,<3.4', 'mmdet3d>=1.1'],
        'tests': ['pytest', 'pytest-timeout'],
    },
    entry_points={
        'console_scripts': [
            'mmdet3d-ddp-guard=mmdet3d_ddp_guard.__main__:main',
        ],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
    ],
    license='Apache License 2.0',
)
