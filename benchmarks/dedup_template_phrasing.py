"""What the template families of ``benchmarks/dedup_template_sets.py`` are made of: the
subjects of the manual families and each family's stock phrasing."""

from __future__ import annotations

__all__ = ["PY_MODULES", "SQL_OBJECTS", "SQL_VERBS", "STOCK"]

# Each entry: object, its Chinese name (the manual pages of one reference).
SQL_OBJECTS = [
    ("TABLE", "表"), ("INDEX", "索引"), ("SEQUENCE", "序列"), ("VIEW", "视图"),
    ("FUNCTION", "函数"), ("OPERATOR", "操作符"), ("OPERATOR CLASS", "操作符类"),
    ("OPERATOR FAMILY", "操作符族"), ("TRIGGER", "触发器"), ("SCHEMA", "模式"),
    ("ROLE", "角色"), ("TYPE", "类型"), ("DOMAIN", "域"), ("EXTENSION", "扩展"),
    ("CONVERSION", "编码转换"), ("COLLATION", "排序规则"), ("AGGREGATE", "聚集函数"),
    ("RULE", "重写规则"), ("POLICY", "行安全策略"), ("PUBLICATION", "发布"),
    ("SUBSCRIPTION", "订阅"), ("STATISTICS", "扩展统计对象"), ("TABLESPACE", "表空间"),
    ("DATABASE", "数据库"), ("USER MAPPING", "用户映射"), ("FOREIGN TABLE", "外部表"),
    ("SERVER", "外部服务器"), ("EVENT TRIGGER", "事件触发器"), ("LANGUAGE", "过程语言"),
    ("MATERIALIZED VIEW", "物化视图"), ("TEXT SEARCH PARSER", "文本搜索解析器"),
    ("TEXT SEARCH DICTIONARY", "文本搜索字典"), ("PROCEDURE", "过程"), ("CAST", "类型转换"),
]  # fmt: skip
SQL_VERBS = [("CREATE", "定义"), ("ALTER", "更改"), ("DROP", "删除"), ("COMMENT ON", "注释"),
              ("GRANT ON", "授权"), ("REVOKE ON", "回收")]  # fmt: skip
PY_MODULES = (
    "json", "os", "os.path", "shutil", "textwrap", "re", "string", "random", "statistics",
    "itertools", "functools", "operator", "collections", "heapq", "bisect", "math", "cmath",
    "base64", "binascii", "hashlib", "zlib", "gzip", "tarfile", "zipfile", "csv", "time",
    "calendar", "datetime", "difflib", "fnmatch", "glob", "tempfile", "logging", "inspect",
    "copy", "pprint", "secrets", "uuid", "urllib.parse", "html", "shlex", "platform",
)  # fmt: skip

# Stock phrasing of each family: lines with a slot for the page's subject ({s}); a page
# uses most of them (real reference pages repeat their site's phrasing page after page).
STOCK = {
    "manual/0": [
        "{s}的名称（可以是模式限定的）。",
        "要执行这个命令，当前用户必须是{s}的拥有者。",
        "如果指定的{s}不存在，那么发出一个通知而不是抛出一个错误。",
        "级联删除依赖于{s}的对象，然后删除所有依赖于那些对象的对象。",
        "如果有任何对象依赖于{s}，则拒绝执行该命令。这是默认值。",
        "新的拥有者必须是{s}所在模式上具有 CREATE 特权的角色。",
        "只有超级用户或者{s}的拥有者才能执行这个命令。",
        "这个命令不能在一个事务块内部执行。",
        "{s}的新名称不能与已有对象的名称冲突。",
        "更多信息请参考本手册中关于{s}的章节。",
        "这是一个 PostgreSQL 扩展。",
        "要修改{s}的模式，你还必须拥有新模式上的 CREATE 特权。",
    ],
    "manual/1": [
        "本函数是线程安全的，可以在多个线程中同时调用{s}。",
        "如果参数类型不正确，则引发 TypeError 异常。",
        "如果参数的值超出范围，则引发 ValueError 异常。",
        "{s}的行为与内置函数保持一致。",
        "所有参数都可以使用关键字的形式传入。",
        "在 3.3 版本中更改：增加了对路径类对象的支持。",
        "可以通过 help() 查看{s}的完整说明。",
        "此函数的返回值是一个新对象，不会修改原对象。",
        "审计事件：调用{s}时会引发一个审计事件。",
        "参见本模块的源代码以了解{s}的实现细节。",
        "另请参阅本节开头关于{s}的说明。",
    ],
    "help/0": [
        "{s}功能仅对已登录的用户开放。",
        "请确保您的客户端已升级到最新版本后再进行{s}操作。",
        "如果网络连接不稳定，{s}可能会失败，请稍后重试。",
        "免费用户每天可以进行{s}操作的次数有限。",
        "会员用户享有更快的{s}速度。",
        "{s}完成后，您会在消息中心收到一条通知。",
        "您也可以在网页版中进行{s}操作。",
        "如果您在{s}时遇到问题，请查看常见问题或联系在线客服。",
        "为了保护您的账号安全，请不要将密码告诉他人。",
        "客服工作时间为每天9:00至21:00。",
    ],
    "help/1": [
        "开启{s}后，手机的耗电量可能会增加。",
        "部分机型不支持{s}功能，请以实际机型为准。",
        "如果找不到{s}选项，请将系统升级到最新版本。",
        "您可以在控制中心快速开启或关闭{s}。",
        "{s}的效果因使用环境不同而有所差异。",
        "恢复出厂设置后，{s}的相关设置将被清除。",
        "在设置中搜索“{s}”可以快速找到该选项。",
        "如需帮助，请拨打服务热线或前往服务中心。",
        "使用{s}时请注意保护个人隐私。",
    ],
    "spec/0": [
        "{s}采用食品级材质，安全健康。",
        "{s}支持24小时预约功能，方便快捷。",
        "本店所售{s}均为正品行货，享受全国联保。",
        "{s}具有防干烧保护功能。",
        "请勿将{s}放置在潮湿或高温的环境中。",
        "首次使用{s}前请仔细阅读说明书。",
        "{s}外观简约大方，适合各种厨房风格。",
        "如商品出现质量问题，七天内可无理由退换货。",
        "配送范围覆盖全国，付款后48小时内发货。",
        "发票：本店支持开具电子发票。",
    ],
    "spec/1": [
        "{s}支持5G全网通，双卡双待。",
        "{s}支持NFC功能和红外遥控。",
        "{s}配备立体声双扬声器。",
        "{s}支持快充，半小时可充至百分之五十以上。",
        "{s}出厂预装最新版本的操作系统。",
        "本页面参数为官方公布数据，仅供参考。",
        "{s}的实际可用存储空间小于标称值。",
        "屏幕尺寸按矩形标准测量，实际可视区域略小。",
        "包装清单：手机、充电器、数据线、取卡针、快速指南、保修卡。",
    ],
    "forum/0": [
        "楼主说得很有道理，{s}确实是这样。",
        "同问，我家的{s}也有这个问题。",
        "建议楼主联系售后，{s}一般都能保修。",
        "顶一下，希望有懂{s}的朋友来回答。",
        "我用{s}两年了，感觉还不错。",
        "本帖最后由管理员编辑，请勿发布广告。",
        "谢谢分享，学习了。",
        "路过，帮顶。",
        "请问{s}在哪里买比较便宜？",
    ],
    "forum/1": [
        "这个问题我也遇到过，{s}重新设置一下就好了。",
        "建议去官方售后检查一下{s}。",
        "可以先恢复出厂设置试试，{s}一般就正常了。",
        "{s}的问题很常见，不用太担心。",
        "回答仅供参考，如有错误请指正。",
        "我也想知道，坐等大神回答。",
        "这个要看具体情况，{s}的型号不同处理方法也不一样。",
        "感谢回答，问题已经解决了。",
    ],
}
